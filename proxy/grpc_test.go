package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nemocache/nemo/internal/testenv"
)

// grpcFrontend is a GRPCFrontend with one unary method, /nemo.test.T/Call:
// "panic" panics, "wait" blocks until release is closed, anything else is
// echoed; and GET /rest on echo.
type grpcFrontend struct {
	srv     *grpc.Server
	started chan struct{}
	release chan struct{}
}

func newGRPCFrontend(env Env) *grpcFrontend {
	f := &grpcFrontend{srv: grpc.NewServer(env.GRPC...), started: make(chan struct{}, 1), release: make(chan struct{})}
	f.srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "nemo.test.T",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if icpt == nil {
				return f.call(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: f, FullMethod: "/nemo.test.T/Call"},
				func(ctx context.Context, req any) (any, error) { return f.call(ctx, req.(*wrapperspb.StringValue)) })
		}}},
	}, f)
	return f
}

func (f *grpcFrontend) call(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	switch in.Value {
	case "panic":
		panic("boom")
	case "wait":
		f.started <- struct{}{}
		<-f.release
	}
	return in, nil
}

func (f *grpcFrontend) Register(e *echo.Echo) {
	e.GET("/rest", func(c echo.Context) error { return c.String(200, c.Request().Proto) })
}

func (f *grpcFrontend) GRPCServer() *grpc.Server { return f.srv }

func callT(ctx context.Context, conn *grpc.ClientConn, v string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, "/nemo.test.T/Call", wrapperspb.String(v), out)
	return out.GetValue(), err
}

// TestGRPCFrontendSharesThePort: a GRPCFrontend's listener serves gRPC on
// grpc-go's transport and HTTP/1.1 to echo; a panic is INTERNAL and an
// error line; each call is logged at debug level; shutdown lets a call in
// flight finish.
func TestGRPCFrontendSharesThePort(t *testing.T) {
	var f *grpcFrontend
	var logs syncBuffer
	s, err := New(Options{Config: testConfig(t), Open: checkedOpen(t), Logger: testLogger(&logs), Frontends: []Mount{
		{Name: "g", Addr: "127.0.0.1:0", New: func(env Env) (Frontend, error) { f = newGRPCFrontend(env); return f, nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	waitStatus(t, "http://"+s.AdminAddr()+"/readyz", 200)
	addr := s.FrontendAddr("g")

	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if v, err := callT(ctx, conn, "hi"); err != nil || v != "hi" {
		t.Fatalf("call: %q, %v", v, err)
	}
	if code, body := get("http://" + addr + "/rest"); code != 200 || body != "HTTP/1.1" {
		t.Errorf("HTTP/1.1 on the gRPC frontend's port: %d %q", code, body)
	}
	if _, err := callT(ctx, conn, "panic"); status.Code(err) != codes.Internal {
		t.Errorf("panicking call: %v, want INTERNAL", err)
	}
	l := logs.String()
	if !strings.Contains(l, "handler panic") || !strings.Contains(l, "path=/nemo.test.T/Call") || !strings.Contains(l, "status=Internal") {
		t.Errorf("log lacks the panic or the request line:\n%s", l)
	}

	// A call in flight when shutdown starts finishes; new ones are refused.
	result := make(chan error, 1)
	go func() {
		_, err := callT(context.Background(), conn, "wait")
		result <- err
	}()
	<-f.started
	cancel()
	// Shutdown has closed the listener (it does before it waits for the
	// call), so the call finishes under it.
	testenv.WaitFor(t, 10*time.Second, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(f.release)
	if err := <-result; err != nil {
		t.Errorf("call in flight at shutdown: %v", err)
	}
	stopped = true
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	c := &http.Client{Timeout: time.Second}
	if resp, err := c.Get("http://" + addr + "/rest"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Errorf("listener still serving after shutdown")
	}
}
