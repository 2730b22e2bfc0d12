package main

import (
	"maps"
	"slices"
	"strconv"
)

// tenantFlag is a per-tenant setting: "V" for every tenant, "TENANT=V" for
// one, comma-separated or repeated (-tenant-weight acme=3,beta=2).
type tenantFlag[T any] struct {
	perClass[T]
	want  string
	parse func(string) (T, bool)
	show  func(T) string
}

func (f *tenantFlag[T]) String() string {
	if f == nil || f.show == nil {
		return ""
	}
	return f.format(f.show)
}

func (f *tenantFlag[T]) Set(v string) error { return f.set(v, f.want, f.parse) }

// get is the setting of one tenant.
func (f *tenantFlag[T]) get(tenant string) T {
	if v, ok := f.classes[tenant]; ok {
		return v
	}
	return f.all
}

func newIntTenantFlag(def, least int, want string) *tenantFlag[int] {
	return &tenantFlag[int]{perClass: perClass[int]{all: def}, want: want, show: strconv.Itoa,
		parse: func(s string) (int, bool) {
			n, err := strconv.Atoi(s)
			return n, err == nil && n >= least
		}}
}

// tenantFlags are the per-tenant settings.
type tenantFlags struct {
	weight *tenantFlag[int]
}

func newTenantFlags() *tenantFlags {
	return &tenantFlags{
		weight: newIntTenantFlag(1, 1, "a weight of 1 or more, as W or TENANT=W"),
	}
}

// named is every tenant a per-tenant flag names, in name order: the
// tenants the per-tenant metrics name.
func (t *tenantFlags) named() []string {
	set := map[string]bool{}
	for n := range t.weight.classes {
		set[n] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// weights are the weights of the tenants named (node.Config.TenantWeights).
func (t *tenantFlags) weights() map[string]int {
	w := map[string]int{}
	for _, n := range t.named() {
		w[n] = t.weight.get(n)
	}
	return w
}
