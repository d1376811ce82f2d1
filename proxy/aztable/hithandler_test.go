package aztable

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nemocache/nemo/internal/aztest"
)

// BenchmarkHitHandler: the Azure frontend's handler alone answering a
// signed GET of a buffered 1 KiB entity (no network, no client), with
// allocations: the part of BenchmarkHitPath's server CPU that is nemo's.
func BenchmarkHitHandler(b *testing.B) {
	n := overEmbedded(b)
	ctx := context.Background()
	svc := service(b, n.URL, aztest.Key)
	if _, err := svc.CreateTable(ctx, "hit", nil); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.NewClient("hit").AddEntity(ctx, hitEntity(), nil); err != nil {
		b.Fatal(err)
	}
	path := "/" + aztest.Account + "/hit(PartitionKey='p',RowKey='r0000')"
	req := signedGet(b, "http://127.0.0.1"+path, path)
	req.RequestURI = path
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		n.Handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
