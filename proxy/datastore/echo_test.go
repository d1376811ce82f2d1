package datastore

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"github.com/labstack/echo/v4"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/nemocache/nemo/cache"
)

// TestRegisterOnEcho mounts the frontend on an echo server (as package
// proxy does, behind h2c) and uses it over gRPC and REST.
func TestRegisterOnEcho(t *testing.T) {
	n := startNemo(t, embeddedBackend(t.TempDir()), "p", cache.Options{})
	e := echo.New()
	n.f.Register(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h2c.NewHandler(e, &http2.Server{})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := client(t, ln.Addr().String(), "p")
	type E struct{ N int }
	k := datastore.NameKey("K", "a", nil)
	if _, err := c.Put(context.Background(), k, &E{N: 4}); err != nil {
		t.Fatal(err)
	}
	var got E
	if err := c.Get(context.Background(), k, &got); err != nil || got.N != 4 {
		t.Fatalf("gRPC through echo: %v %v", got, err)
	}
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/projects/p:lookup", "application/json",
		strings.NewReader(`{"keys":[{"path":[{"kind":"K","name":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("REST through echo: %d", resp.StatusCode)
	}
}
