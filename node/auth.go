package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// Security says who may call a node's HTTP API and how nodes reach each
// other. The zero value is an open API over plain HTTP, as before there was
// a choice: anyone who reaches the listener runs any tenant's actors.
//
// With any token set, every call but the probes (GET /v1/healthz and
// /v1/readyz) and the API's description (GET /v1/openapi.json) needs
// "Authorization: Bearer <token>": without one, or with one the node does
// not know, it is a 401; a tenant's token used outside that tenant's actors
// is a 403.
type Security struct {
	// Token reaches every tenant's actors (an operator's token).
	Token string
	// TenantTokens maps a tenant to a token that reaches only that
	// tenant's actors (/v1/actors/{tenant}/...) and its lists of alarms
	// and dead letters (/v1/tenants/{tenant}/...).
	TenantTokens map[string]string
	// PeerToken is the nodes' own credential: a node forwarding a call to
	// the holder sends it instead of the client's token, and a node
	// accepts it for any actor. Every node of a cluster must share it.
	// Without it, a forwarded call carries the client's token.
	PeerToken string
	// PeerTLS, if set, makes forwarding use HTTPS with this client
	// configuration (its RootCAs trust the peers' certificates). Set it
	// when the nodes' listeners serve TLS.
	PeerTLS *tls.Config
}

// security is a node's Security, checked and ready to compare.
type security struct {
	open    bool
	tokens  []principal // every known token, compared in full each time
	peerTok string
	scheme  string
	client  *http.Client
}

// principal is who a token speaks for: a tenant, or everyone (""); peer
// marks the peer token, the nodes' own.
type principal struct {
	sum    [sha256.Size]byte
	tenant string
	peer   bool
}

func newSecurity(s Security) (*security, error) {
	sec := &security{scheme: "http", peerTok: s.PeerToken}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.PeerTLS != nil {
		sec.scheme = "https"
		tr.TLSClientConfig = s.PeerTLS.Clone()
	}
	sec.client = &http.Client{Timeout: 60 * time.Second, Transport: tr}
	seen := map[[sha256.Size]byte]string{}
	add := func(tok, tenant, what string, peer bool) error {
		if tok == "" {
			return fmt.Errorf("node: security: %s is empty", what)
		}
		if strings.TrimSpace(tok) != tok || strings.ContainsAny(tok, "\r\n") {
			return fmt.Errorf("node: security: %s has leading or trailing white space", what)
		}
		sum := sha256.Sum256([]byte(tok))
		if other, ok := seen[sum]; ok {
			return fmt.Errorf("node: security: %s is the same as %s", what, other)
		}
		seen[sum] = what
		sec.tokens = append(sec.tokens, principal{sum: sum, tenant: tenant, peer: peer})
		return nil
	}
	if s.Token != "" {
		if err := add(s.Token, "", "the token", false); err != nil {
			return nil, err
		}
	}
	if s.PeerToken != "" {
		if err := add(s.PeerToken, "", "the peer token", true); err != nil {
			return nil, err
		}
	}
	for tenant, tok := range s.TenantTokens {
		if err := abi.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("node: security: tenant token: %w", err)
		}
		if err := add(tok, tenant, fmt.Sprintf("the token of tenant %q", tenant), false); err != nil {
			return nil, err
		}
	}
	sec.open = len(sec.tokens) == 0
	return sec, nil
}

// errNoToken and errBadToken are the causes of a 401.
var (
	errNoToken  = errors.New("this node needs a token: send Authorization: Bearer <token>")
	errBadToken = errors.New("the token is not one this node knows")
)

// who returns the principal of the request's bearer token.
func (s *security) who(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" {
		return principal{}, errNoToken
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, errors.New("the Authorization header is not \"Bearer <token>\"")
	}
	return s.whoToken(tok)
}

// whoToken returns the principal of a token (the bearer token of a call,
// or the one typed into the console's sign-in form).
func (s *security) whoToken(tok string) (principal, error) {
	sum := sha256.Sum256([]byte(tok))
	found := -1
	// Compare against every token, in constant time each, whichever
	// matches: the time taken says nothing about which one is close.
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, errBadToken
	}
	return s.tokens[found], nil
}

// actorsTenant returns the tenant of a /v1/actors/{tenant}/... or
// /v1/tenants/{tenant}/... path.
func actorsTenant(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/actors/")
	if !ok {
		rest, ok = strings.CutPrefix(r.URL.EscapedPath(), "/v1/tenants/")
	}
	if !ok {
		return "", false
	}
	seg, _, _ := strings.Cut(rest, "/")
	tenant, err := url.PathUnescape(seg)
	if err != nil {
		return "", false
	}
	return tenant, true
}

// guard wraps the API: the probes and the API's description are open;
// everything else needs a token that reaches the path's tenant.
func (s *security) guard(next http.Handler) http.Handler {
	if s.open {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/healthz" || r.URL.Path == "/v1/readyz" || r.URL.Path == "/v1/openapi.json" {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.who(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wasmkeep"`)
			writeProblem(w, http.StatusUnauthorized, CodeUnauthorized, err.Error())
			return
		}
		if p.tenant != "" {
			tenant, ok := actorsTenant(r)
			if !ok {
				writeProblem(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("the token of tenant %q reaches only /v1/actors/%s/... and /v1/tenants/%s/...", p.tenant, p.tenant, p.tenant))
				return
			}
			if tenant != p.tenant {
				writeProblem(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("the token of tenant %q does not reach tenant %q", p.tenant, tenant))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// fromPeer reports whether the request carries the peer token: a call
// another node of the cluster sent (false without a peer token: the nodes
// cannot then be told from their clients).
func (s *security) fromPeer(r *http.Request) bool {
	if s.peerTok == "" {
		return false
	}
	want := sha256.Sum256([]byte("Bearer " + s.peerTok))
	got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

// forwardAuth sets the credential of a call forwarded to the holder: the
// peer token if there is one, else the client's own.
func (s *security) forwardAuth(req, from *http.Request) {
	if s.peerTok != "" {
		req.Header.Set("Authorization", "Bearer "+s.peerTok)
		return
	}
	if h := from.Header.Get("Authorization"); h != "" {
		req.Header.Set("Authorization", h)
	}
}
