package check

// No cluster runs where these tests run, and kubeconform fetches its
// schemas from the network at run time, so the set is checked here: the
// kustomization is rendered as kubectl apply -k renders it (Kustomize's
// krusty), every document is decoded strictly into its type of
// k8s.io/api (a field that is not the type's is an error), and what
// keepnode needs of it is held against keepnode itself: its flags (from
// keepnode -help), its probes' routes, the image's configuration and user.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// root is the repository's root, from this directory.
var root = filepath.Join("..", "..", "..")

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// set is a rendered kustomization, each document decoded into its type.
type set struct {
	sts      []*appsv1.StatefulSet
	services map[string]*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
}

// render builds the kustomization in dir and decodes each document
// strictly: an unknown field, a duplicate one or a value of the wrong type
// is an error, as is a kind the set should not hold (a Secret would put
// its values in the repository).
func render(t *testing.T, dir string) set {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	s := set{services: map[string]*corev1.Service{}}
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		id := r.GetKind() + " " + r.GetName()
		var obj any
		switch r.GetApiVersion() + " " + r.GetKind() {
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			s.sts, obj = append(s.sts, o), o
		case "v1 Service":
			o := &corev1.Service{}
			s.services[r.GetName()], obj = o, o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			s.pdbs, obj = append(s.pdbs, o), o
		default:
			t.Errorf("%s: a kind the set should not hold (Secrets are created with kubectl, docs/deploy.md)", id)
			continue
		}
		if err := decodeStrict(b, obj); err != nil {
			t.Errorf("%s: %v\n%s", id, err, b)
		}
		for _, e := range validation.IsDNS1035Label(r.GetName()) {
			t.Errorf("%s: name: %s", id, e)
		}
	}
	if len(s.sts) != 1 || len(s.pdbs) != 1 || len(s.services) != 2 {
		t.Fatalf("%s renders %d StatefulSets, %d PodDisruptionBudgets and %d Services; want 1, 1 and 2 (peers and clients)", dir, len(s.sts), len(s.pdbs), len(s.services))
	}
	return s
}

// keepnode is what the set must agree with, read from keepnode itself.
type keepnode struct {
	envs         map[string]bool // the variables keepnode reads
	flags        map[string]bool
	dataDir      string // the image configuration's data directory
	port         int32  // and the port it listens on
	metricsPort  int32
	configPath   string // where the image puts its configuration
	user         int64  // the image's user
	healthz      string // the routes of the node's probes
	readyz       string
	secretKeys   map[string][]string // the Secrets docs/deploy.md creates, by name
	drainTimeout string
}

var facts *keepnode

// keepnodeFacts builds keepnode and reads its flags from -help, and reads
// the image's configuration, the Dockerfile, the node's routes and the
// deployment guide.
func keepnodeFacts(t *testing.T) *keepnode {
	t.Helper()
	if facts != nil {
		return facts
	}
	k := &keepnode{envs: map[string]bool{}, flags: map[string]bool{}, secretKeys: map[string][]string{}}
	bin := filepath.Join(t.TempDir(), "keepnode")
	build := exec.Command("go", "build", "-o", bin, "./cmd/keepnode")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/keepnode: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("keepnode -help: %v\n%s", err, help)
	}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		k.flags[m[1]] = true
		k.envs["KEEPNODE_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
	}
	// The variables -help names besides the flags' own: the tokens.
	for _, v := range regexp.MustCompile(`\$(KEEPNODE_[A-Z_]+)`).FindAllStringSubmatch(string(help), -1) {
		k.envs[v[1]] = true
	}
	if !k.flags["data"] || !k.flags["advertise"] || !k.envs["KEEPNODE_TOKEN"] || !k.envs["KEEPNODE_PEER_TOKEN"] {
		t.Fatalf("keepnode -help: flags %v, variables %v: not what keepnode has", k.flags, k.envs)
	}
	if m := regexp.MustCompile(`(?m)^  -drain-timeout duration\n.*\(default (\S+)\)`).FindStringSubmatch(string(help)); m != nil {
		k.drainTimeout = m[1]
	}

	toml := readFile(t, "deploy/keepnode.toml")
	setting := func(key string) string {
		m := regexp.MustCompile(`(?m)^` + key + ` = "([^"]*)"`).FindStringSubmatch(toml)
		if m == nil {
			t.Fatalf("deploy/keepnode.toml sets no %s", key)
		}
		return m[1]
	}
	k.dataDir = setting("data")
	port := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("deploy/keepnode.toml: address %q", addr)
		}
		return int32(n)
	}
	k.port, k.metricsPort = port(setting("listen")), port(setting("metrics-addr"))

	docker := readFile(t, "deploy/Dockerfile")
	m := regexp.MustCompile(`(?m)^COPY deploy/keepnode.toml (\S+)$`).FindStringSubmatch(docker)
	u := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(docker)
	if m == nil || u == nil {
		t.Fatal("deploy/Dockerfile: no COPY of deploy/keepnode.toml, or no numeric USER")
	}
	k.configPath = m[1]
	k.user, _ = strconv.ParseInt(u[1], 10, 64)

	routes := readFile(t, "node/http.go")
	for _, r := range []struct {
		path string
		into *string
	}{{"/v1/healthz", &k.healthz}, {"/v1/readyz", &k.readyz}} {
		if strings.Contains(routes, `{"GET `+r.path+`", `) {
			*r.into = r.path
		}
	}

	doc := readFile(t, "docs/deploy.md")
	for _, m := range regexp.MustCompile(`kubectl create secret generic (\S+)((?:[ \t]*\\?\n?[ \t]*--from-(?:literal|file)=[^\s=]+=(?:"[^"]*"|\S+))+)`).FindAllStringSubmatch(doc, -1) {
		for _, kv := range regexp.MustCompile(`--from-(?:literal|file)=([^\s=]+)=`).FindAllStringSubmatch(m[2], -1) {
			k.secretKeys[m[1]] = append(k.secretKeys[m[1]], kv[1])
		}
	}
	facts = k
	return k
}

// container returns the StatefulSet's keepnode container.
func container(t *testing.T, sts *appsv1.StatefulSet) *corev1.Container {
	t.Helper()
	for i, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "keepnode" {
			return &sts.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("StatefulSet %s has no container named keepnode", sts.Name)
	return nil
}

// setting is what a flag is set to in the container: by its argument, else
// by its variable, else "".
func setting(c *corev1.Container, flag string) (string, *corev1.EnvVar) {
	for i, a := range c.Args {
		if a == "-"+flag && i+1 < len(c.Args) {
			return c.Args[i+1], nil
		}
		if v, ok := strings.CutPrefix(a, "-"+flag+"="); ok {
			return v, nil
		}
	}
	name := "KEEPNODE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	for i, e := range c.Env {
		if e.Name == name {
			return e.Value, &c.Env[i]
		}
	}
	return "", nil
}

// checkSet holds a rendered set to what keepnode needs; https says whether
// the node serves HTTPS in it.
func checkSet(t *testing.T, s set, https bool) {
	k := keepnodeFacts(t)
	sts := s.sts[0]
	pod := sts.Spec.Template.Spec
	c := container(t, sts)
	podLabels := labels.Set(sts.Spec.Template.Labels)

	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("StatefulSet %s: selector %v does not select its pods' labels %v (%v)", sts.Name, sts.Spec.Selector, podLabels, err)
	}

	// Arguments and variables name only what keepnode has; the arguments
	// are flags and their values, nothing else.
	for i := 0; i < len(c.Args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(c.Args[i], "-"), "=")
		if !strings.HasPrefix(c.Args[i], "-") || !k.flags[name] {
			t.Errorf("container argument %q is not a keepnode flag (keepnode -help)", c.Args[i])
			continue
		}
		if !hasValue && name != "log-json" && name != "create-bucket" && name != "durable-commits" && name != "pprof" {
			i++
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "KEEPNODE_") && !k.envs[e.Name] {
			t.Errorf("container variable %s is not one keepnode reads: keepnode would refuse to start", e.Name)
		}
	}
	if !is(pod.EnableServiceLinks, false) {
		// Kubernetes would add NAME_SERVICE_HOST, NAME_PORT, ... for each
		// Service, and a Service named keepnode... gives KEEPNODE_ ones,
		// which keepnode refuses as no setting of its own.
		for name := range s.services {
			if prefix := strings.ToUpper(strings.ReplaceAll(name, "-", "_")); strings.HasPrefix(prefix+"_", "KEEPNODE_") {
				t.Errorf("enableServiceLinks is not false: Service %s would add %s_SERVICE_HOST to the environment, which keepnode refuses", name, prefix)
			}
		}
	}
	config, _ := setting(c, "config")
	if config != k.configPath {
		t.Errorf("the container's -config is %q: want the image's configuration, %s", config, k.configPath)
	}

	// The data directory is on the pod's own volume.
	data, _ := setting(c, "data")
	if data == "" {
		data = k.dataDir
	}
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
		if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) || pvc.Spec.Resources.Requests.Storage().IsZero() {
			t.Errorf("volume claim %s: want ReadWriteOnce and a size", pvc.Name)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[data]; !ok || !claims[m.Name] || m.SubPath != "" {
		t.Errorf("the data directory %s is not a volume claim template's mount (mounts %v, claims %v)", data, c.VolumeMounts, claims)
	}

	// Non-root, and read-only but for the data and a temporary directory
	// (the engine makes its empty-database template there).
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil || !is(psc.RunAsNonRoot, true) || psc.RunAsUser == nil || *psc.RunAsUser != k.user ||
		psc.FSGroup == nil || *psc.FSGroup != k.user {
		t.Errorf("pod security context %+v: want runAsNonRoot, runAsUser and fsGroup %d (the image's user, who must write the new volume)", psc, k.user)
	}
	if csc == nil || !is(csc.ReadOnlyRootFilesystem, true) || !is(csc.AllowPrivilegeEscalation, false) {
		t.Errorf("container security context %+v: want a read-only root filesystem and no privilege escalation", csc)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil || m.ReadOnly {
		t.Errorf("with a read-only root filesystem, /tmp must be a writable emptyDir (mounts %v)", c.VolumeMounts)
	}

	// Each pod under its stable name: its node ID, and the address it
	// advertises under the headless Service, published also while not
	// ready (a node that is not ready may hold actors the others forward to).
	peers := s.services[sts.Spec.ServiceName]
	if peers == nil || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q: want a headless Service (clusterIP None) that publishes pods that are not ready", sts.Spec.ServiceName)
	}
	podName := ""
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			podName = "$(" + e.Name + ")"
		}
	}
	if id, _ := setting(c, "node-id"); podName == "" || id != podName {
		t.Errorf("node ID %q: want the pod's name (%s, from the downward API), stable across restarts", id, podName)
	}
	adv, _ := setting(c, "advertise")
	host, port, err := net.SplitHostPort(adv)
	if err != nil || !strings.HasPrefix(host, podName+"."+peers.Name+".") || port != strconv.Itoa(int(k.port)) {
		t.Errorf("advertise %q: want %s.%s.NAMESPACE.svc:%d, the pod's name under the headless Service", adv, podName, peers.Name, k.port)
	}

	// The listen port is the container's, and each Service's target.
	portByName := map[string]int32{}
	for _, p := range c.Ports {
		portByName[p.Name] = p.ContainerPort
	}
	if portByName["http"] != k.port || portByName["metrics"] != k.metricsPort {
		t.Errorf("container ports %v: want http %d and metrics %d (keepnode.toml)", c.Ports, k.port, k.metricsPort)
	}
	target := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return portByName[p.StrVal]
		}
		return p.IntVal
	}
	for name, svc := range s.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s: selector %v does not select keepnode's pods", name, svc.Spec.Selector)
		}
		if len(svc.Spec.Ports) == 0 || target(svc.Spec.Ports[0].TargetPort) != k.port {
			t.Errorf("Service %s: ports %v: want the API's port %d", name, svc.Spec.Ports, k.port)
		}
	}

	// Liveness on the node's health route, readiness on its readiness
	// route, on the API's port, in the scheme it serves.
	scheme := corev1.URISchemeHTTP
	if https {
		scheme = corev1.URISchemeHTTPS
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, k.healthz}, {"liveness", c.LivenessProbe, k.healthz}, {"readiness", c.ReadinessProbe, k.readyz}} {
		if p.path == "" {
			t.Fatalf("node/http.go: no route for the %s probe", p.what)
		}
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: none, or not an HTTP GET", p.what)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || target(g.Port) != k.port || g.Scheme != scheme && !(g.Scheme == "" && scheme == corev1.URISchemeHTTP) {
			t.Errorf("%s probe: %s %s on port %v: want %s %s on %d", p.what, g.Scheme, g.Path, g.Port.String(), scheme, p.path, k.port)
		}
	}

	// Time for the clean shutdown: deliveries under way (-drain-timeout),
	// then the uploads and releases.
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 45 {
		t.Errorf("terminationGracePeriodSeconds %s: want at least 45 s (drain timeout %s, then uploads and releases)", fmtPtr(g), k.drainTimeout)
	}

	// One node down on purpose at a time.
	pdb := s.pdbs[0]
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || err != nil || pdbSel.Empty() || !pdbSel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, selector %v: want 1, selecting keepnode's pods", pdb.Name, pdb.Spec.MaxUnavailable, pdb.Spec.Selector)
	}

	// Secrets are referenced, not committed: each key the pod reads is one
	// the guide's kubectl create secret commands create, unless optional.
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			if strings.Contains(e.Name, "SECRET") || e.Name == "KEEPNODE_TOKEN" || e.Name == "KEEPNODE_PEER_TOKEN" {
				t.Errorf("variable %s has a value in the set: take it from a Secret", e.Name)
			}
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if !slices.Contains(k.secretKeys[ref.Name], ref.Key) && !is(ref.Optional, true) {
			t.Errorf("variable %s reads key %s of Secret %s, which docs/deploy.md does not create (it creates %v)", e.Name, ref.Key, ref.Name, k.secretKeys)
		}
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			if _, ok := k.secretKeys[v.Secret.SecretName]; !ok {
				t.Errorf("volume %s mounts Secret %s, which docs/deploy.md does not create", v.Name, v.Secret.SecretName)
			}
		}
	}
	if https {
		for _, f := range []string{"tls-cert", "tls-key", "tls-ca"} {
			path, _ := setting(c, f)
			m, ok := mounts[filepath.Dir(path)]
			if path == "" || !ok || volumes[m.Name].Secret == nil {
				t.Errorf("-%s %q: want a file of a mounted Secret", f, path)
				continue
			}
			if key := filepath.Base(path); !slices.Contains(k.secretKeys[volumes[m.Name].Secret.SecretName], key) {
				t.Errorf("-%s %s: docs/deploy.md's Secret %s has no key %s", f, path, volumes[m.Name].Secret.SecretName, key)
			}
		}
	}
}

// The set as it is: plain HTTP, with tokens.
func TestKubernetesSet(t *testing.T) {
	checkSet(t, render(t, ".."), false)
}

// The set with the TLS component, as an overlay that adds it.
func TestKubernetesSetWithTLS(t *testing.T) {
	base, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// Kustomize takes bases and components by relative paths only.
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents: [%q]\n", rel, filepath.Join(rel, "tls"))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	checkSet(t, render(t, overlay), true)
}

// The strict decoding refuses what the API server would: a field the type
// does not have, and a value of the wrong type.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 1}], clusterIp: None}\n",
		"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replicas: three}\n",
	} {
		var obj any = &corev1.Service{}
		if strings.Contains(doc, "StatefulSet") {
			obj = &appsv1.StatefulSet{}
		}
		if err := decodeStrict([]byte(doc), obj); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// decodeStrict decodes a YAML document into obj as the API server reads
// JSON: field names match exactly (encoding/json would take clusterIp
// for clusterIP), and an unknown or duplicate field is an error.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// fmtPtr prints what p points at, or "unset".
func fmtPtr[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// is reports whether b is set and equal to want.
func is(b *bool, want bool) bool { return b != nil && *b == want }
