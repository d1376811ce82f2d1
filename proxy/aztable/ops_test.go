package aztable

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
)

// TestOpNames: for every verb, resource, comp parameter and If-Match,
// opName gives one of Ops or "other", and each of Ops names some request:
// Ops is what the frontend's requests can carry in the op label
// (proxy.TestOpLabelsDocumented compares it with docs/metrics.md).
func TestOpNames(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, "MERGE", http.MethodDelete, http.MethodOptions} {
		for _, res := range []resource{{}, {kind: resBatch}, {kind: resTables}, {kind: resTable, table: "t"},
			{kind: resEntitySet, table: "t"}, {kind: resEntity, table: "t", pk: "p", rk: "r"}} {
			for _, q := range []url.Values{{}, {"comp": {"acl"}}, {"restype": {"service"}, "comp": {"properties"}}} {
				for _, h := range []http.Header{{}, {"If-Match": {"*"}}} {
					op := opName(m, res, q, h)
					if op != "other" && !slices.Contains(Ops(), op) {
						t.Errorf("opName(%s, %+v, %v, %v) = %q, not one of Ops", m, res, q, h, op)
					}
					seen[op] = true
				}
			}
		}
	}
	for _, op := range Ops() {
		if !seen[op] {
			t.Errorf("no request is named %q", op)
		}
	}
}
