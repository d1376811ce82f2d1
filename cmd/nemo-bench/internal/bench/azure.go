package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// devKey is Azurite's well-known development account key (its README);
// the azurite and URL targets sign with it, and so does the client of
// nemo's frontend.
const devKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// azPartition is the one partition the azure target's items live in;
// an item's key is its RowKey.
const azPartition = "p"

// azureData is the cache experiments' items loaded into a fresh table of
// an Azure Table endpoint (Azurite). Every run opens what its spec asks
// for in front of it (a nemo process, a bare proxy, or nothing) and reads
// through the aztables SDK.
type azureData struct {
	url     string // the endpoint: scheme, host and the account's path
	account string
	table   string
	direct  *aztables.ServiceClient // to the endpoint itself: loading and cleanup
	dir     string                  // the nemo processes' data directories
	remote                          // the way the series reach the endpoint
	n       uint64
	vsz     int
	o       Options
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
	dir, err := os.MkdirTemp("", "nemo-bench-")
	if err != nil {
		return nil, err
	}
	d := &azureData{url: o.azureURL(), account: account, direct: direct, dir: dir, n: uint64(o.Scale.Records), vsz: o.Scale.ValueSize, o: o,
		table: fmt.Sprintf("nemobench%x", time.Now().UnixNano()&0xffffffffff)}
	if d.remote, err = openRemote(u.Host, o); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if _, err := direct.CreateTable(ctx, d.table, nil); err != nil {
		return nil, errors.Join(err, d.remote.close(), os.RemoveAll(dir))
	}
	if err := d.load(ctx); err != nil {
		return nil, errors.Join(err, d.close())
	}
	return d, nil
}

// load writes the items straight into the table, 100 per transaction.
func (d *azureData) load(ctx context.Context) error {
	c := d.direct.NewClient(d.table)
	var acts []aztables.TransactionAction
	for i := range d.n {
		rk := string(itemKey(i))
		ent, err := azEntity(rk, valueFor([]byte(rk), d.vsz))
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

// azEntity is item rk's entity: its value in property v.
func azEntity(rk string, v []byte) ([]byte, error) {
	return json.Marshal(map[string]string{"PartitionKey": azPartition, "RowKey": rk, "v": string(v)})
}

func (d *azureData) close() error {
	_, err := d.direct.DeleteTable(context.Background(), d.table, nil)
	return errors.Join(err, d.remote.close(), os.RemoveAll(d.dir))
}

// farURL is the endpoint as the series reach it: through the delay
// proxy, with Options.RTT.
func (d *azureData) farURL() string {
	u, err := url.Parse(d.url)
	if err != nil {
		return d.url
	}
	u.Host = d.far
	return u.String()
}

func (d *azureData) items() uint64  { return d.n }
func (d *azureData) valueSize() int { return d.vsz }
func (d *azureData) real() bool     { return true }

func (d *azureData) open(ctx context.Context, spec stackSpec) (cacheStack, error) {
	dir, err := os.MkdirTemp(d.dir, "run-")
	if err != nil {
		return nil, err
	}
	return openProcStack(ctx, d.o, d, spec, dir)
}

func (d *azureData) nemoEnv() ([]string, string) {
	return []string{
		"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_ENDPOINT=" + d.farURL(),
		"NEMO_BACKEND_AZTABLE_ACCOUNT=" + d.account, "NEMO_BACKEND_AZTABLE_KEY=" + devKey,
		"NEMO_FRONTEND_AZURE_ACCOUNT=" + d.account, "NEMO_FRONTEND_AZURE_KEY=" + devKey,
		"NEMO_LISTEN_AZURE_TABLE=127.0.0.1:0", "NEMO_LISTEN_DATASTORE=off",
	}, "aztable"
}

func (d *azureData) proxy() (string, string) { return "http", d.farURL() }

func (d *azureData) backendAddr() string {
	u, err := url.Parse(d.url)
	if err != nil {
		return ""
	}
	return u.Host
}

func (d *azureData) directAddr() string { return d.far }

// client is the SDK's table client of the endpoint at addr (the same
// account path), counting the requests it sends.
func (d *azureData) client(_ context.Context, addr string, sent *atomic.Uint64) (reader, func() error, error) {
	u, err := url.Parse(d.url)
	if err != nil {
		return nil, nil, err
	}
	cred, err := aztables.NewSharedKeyCredential(d.account, devKey)
	if err != nil {
		return nil, nil, err
	}
	svc, err := aztables.NewServiceClientWithSharedKey(u.Scheme+"://"+addr+u.Path, cred, nil)
	if err != nil {
		return nil, nil, err
	}
	return azureClient{client: svc.NewClient(d.table), sent: sent}, func() error { return nil }, nil
}

// azureClient reads and writes the items through the SDK's table client.
type azureClient struct {
	client *aztables.Client
	sent   *atomic.Uint64
}

func (c azureClient) get(ctx context.Context, key []byte) (int, bool, error) {
	c.sent.Add(1)
	resp, err := c.client.GetEntity(ctx, azPartition, string(key), nil)
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

// put replaces the entity (insert-or-replace: the SDK's upsert in
// replace mode, which writes without reading).
func (c azureClient) put(ctx context.Context, key, val []byte) error {
	ent, err := azEntity(string(key), val)
	if err != nil {
		return err
	}
	c.sent.Add(1)
	_, err = c.client.UpsertEntity(ctx, ent, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return err
}

// scan is a range query as an application writes it: a PartitionKey and
// RowKey-bounded $filter with $top, following continuations until limit
// entities came back.
func (c azureClient) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	filter := fmt.Sprintf("PartitionKey eq '%s' and RowKey ge '%s' and RowKey lt '%s'", azPartition, odataString(start), odataString(end))
	top := int32(limit)
	pager := c.client.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Top: &top})
	var keys [][]byte
	for len(keys) < limit && pager.More() {
		c.sent.Add(1)
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
