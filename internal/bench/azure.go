package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/labstack/echo/v4"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/proxy/aztable"
	"github.com/nemocache/nemo/txn"
)

// devKey is Azurite's well-known development account key (its README);
// the azurite and URL targets sign with it, and so does the client of
// nemo's frontend.
const devKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// azPartition is the one partition the azure target's items live in;
// an item's key is its RowKey.
const azPartition = "p"

// azureData is the cache experiments' items loaded into a fresh table of
// an Azure Table endpoint (Azurite), and nemo's Azure Table store adapter
// over it, behind the request counters. Every run opens a fresh buffer
// and engine with nemo's Azure Table frontend over them, in process, and
// reads through the aztables SDK.
type azureData struct {
	account string
	table   string
	direct  *aztables.ServiceClient // to the endpoint itself: loading and cleanup
	counted *adapters.Counted
	n       uint64
	vsz     int
	log     *slog.Logger
}

func newAzureData(ctx context.Context, o Options) (*azureData, error) {
	u, err := url.Parse(o.azureURL())
	if err != nil {
		return nil, err
	}
	account := path.Base(u.Path)
	cred, err := aztables.NewSharedKeyCredential(account, devKey)
	if err != nil {
		return nil, err
	}
	direct, err := aztables.NewServiceClientWithSharedKey(o.azureURL(), cred, nil)
	if err != nil {
		return nil, err
	}
	d := &azureData{account: account, direct: direct, n: uint64(o.Scale.Records), vsz: o.Scale.ValueSize, log: o.Logger,
		table: fmt.Sprintf("nemobench%x", time.Now().UnixNano()&0xffffffffff)}
	if _, err := direct.CreateTable(ctx, d.table, nil); err != nil {
		return nil, err
	}
	if err := d.load(ctx); err != nil {
		return nil, errors.Join(err, d.close())
	}
	st, err := azstore.New(azstore.Options{ServiceURL: o.azureURL(), Account: account, Key: devKey, Logger: o.Logger})
	if err != nil {
		return nil, errors.Join(err, d.close())
	}
	d.counted = adapters.Count(st)
	return d, nil
}

// load writes the items straight into the table, 100 per transaction.
func (d *azureData) load(ctx context.Context) error {
	c := d.direct.NewClient(d.table)
	var acts []aztables.TransactionAction
	for i := range d.n {
		rk := string(itemKey(i))
		ent, err := json.Marshal(map[string]string{"PartitionKey": azPartition, "RowKey": rk, "v": string(valueFor([]byte(rk), d.vsz))})
		if err != nil {
			return err
		}
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: ent})
		if len(acts) == 100 || i == d.n-1 {
			if _, err := c.SubmitTransaction(ctx, acts, nil); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			acts = acts[:0]
		}
	}
	return nil
}

func (d *azureData) close() error {
	_, err := d.direct.DeleteTable(context.Background(), d.table, nil)
	return err
}

func (d *azureData) items() uint64  { return d.n }
func (d *azureData) valueSize() int { return d.vsz }

func (d *azureData) open(ctx context.Context, p cache.Policy, maxBytes int64) (cacheStack, error) {
	e, err := newEngine(d.counted, p, maxBytes, txn.Options{}, d.log)
	if err != nil {
		return nil, err
	}
	f, err := aztable.New(e.eng, aztable.Options{Account: d.account, Key: devKey, Logger: d.log})
	if err != nil {
		return nil, errors.Join(err, e.close())
	}
	srv, addr, err := serveHTTP(func(ec *echo.Echo) { f.Register(ec) })
	if err != nil {
		return nil, errors.Join(err, e.close())
	}
	cred, err := aztables.NewSharedKeyCredential(d.account, devKey)
	if err != nil {
		return nil, errors.Join(err, srv.Close(), e.close())
	}
	svc, err := aztables.NewServiceClientWithSharedKey("http://"+addr+"/"+d.account, cred, nil)
	if err != nil {
		return nil, errors.Join(err, srv.Close(), e.close())
	}
	return &azureStack{engine: e, srv: srv, client: svc.NewClient(d.table)}, nil
}

// serveHTTP serves a frontend's routes on a loopback port.
func serveHTTP(register func(*echo.Echo)) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	ec := echo.New()
	ec.HideBanner, ec.HidePort = true, true
	register(ec)
	srv := &http.Server{Handler: ec, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, ln.Addr().String(), nil
}

// azureStack is a cacheStack on an Azure Table target: the SDK's table
// client talking to nemo's frontend.
type azureStack struct {
	*engine
	srv    *http.Server
	client *aztables.Client
	once   sync.Once
}

func (s *azureStack) warming(bool) {} // a real backend's latency is what it is

func (s *azureStack) close() error {
	var err error
	s.once.Do(func() { err = errors.Join(s.srv.Close(), s.engine.close()) })
	return err
}

func (s *azureStack) get(ctx context.Context, key []byte) (int, bool, error) {
	resp, err := s.client.GetEntity(ctx, azPartition, string(key), nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var ent struct{ V string }
	if err := json.Unmarshal(resp.Value, &ent); err != nil {
		return 0, false, err
	}
	return len(ent.V), true, nil
}

// scan is a range query as an application writes it: a PartitionKey and
// RowKey-bounded $filter with $top, following continuations until limit
// entities came back.
func (s *azureStack) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	filter := fmt.Sprintf("PartitionKey eq '%s' and RowKey ge '%s' and RowKey lt '%s'", azPartition, odataString(start), odataString(end))
	top := int32(limit)
	pager := s.client.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Top: &top})
	var keys [][]byte
	for len(keys) < limit && pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, raw := range page.Entities {
			var ent struct{ RowKey string }
			if err := json.Unmarshal(raw, &ent); err != nil {
				return nil, err
			}
			keys = append(keys, []byte(ent.RowKey))
		}
	}
	return keys[:min(len(keys), limit)], nil
}

func odataString(b []byte) string { return strings.ReplaceAll(string(b), "'", "''") }
