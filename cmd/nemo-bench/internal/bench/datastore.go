package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// dsKind is the kind of the emulator target's entities; an item's key is
// a name key, its name the item's key.
const dsKind = "usertable"

// dsEntity is an item as the Go client stores it: the value unindexed
// (an indexed string is limited to 1500 bytes).
type dsEntity struct {
	V string `datastore:"v,noindex"`
}

// datastoreData is the cache experiments' items loaded into a fresh
// project of the Datastore emulator. Every run opens what its spec asks
// for in front of it (a nemo process, a bare proxy, or nothing) and reads
// through the Go Datastore client (gRPC).
type datastoreData struct {
	host    string // the emulator's host:port
	project string
	direct  *datastore.Client // to the emulator itself: loading and cleanup
	dir     string            // the nemo processes' data directories
	remote                    // the way the series reach the emulator
	n       uint64
	vsz     int
	o       Options
}

// dsClient is a Go Datastore client of the emulator or frontend at addr,
// over plaintext gRPC as DATASTORE_EMULATOR_HOST sets it up.
func dsClient(ctx context.Context, addr, project string) (*datastore.Client, error) {
	return datastore.NewClient(ctx, project,
		option.WithEndpoint("passthrough:///"+addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
}

func dsKey(key []byte) *datastore.Key { return datastore.NameKey(dsKind, string(key), nil) }

func newDatastoreData(ctx context.Context, o Options) (*datastoreData, error) {
	dir, err := os.MkdirTemp("", "nemo-bench-")
	if err != nil {
		return nil, err
	}
	d := &datastoreData{host: o.EmulatorHost, dir: dir, n: uint64(o.Scale.Records), vsz: o.Scale.ValueSize, o: o,
		project: fmt.Sprintf("nemo-bench-%x", time.Now().UnixNano()&0xffffffffff)}
	if d.remote, err = openRemote(d.host, o); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if d.direct, err = dsClient(ctx, o.EmulatorHost, d.project); err != nil {
		return nil, errors.Join(err, d.remote.close(), os.RemoveAll(dir))
	}
	if err := d.load(ctx); err != nil {
		return nil, errors.Join(err, d.close())
	}
	return d, nil
}

// load writes the items straight into the emulator, 500 per call.
func (d *datastoreData) load(ctx context.Context) error {
	var keys []*datastore.Key
	var ents []*dsEntity
	for i := range d.n {
		k := itemKey(i)
		keys = append(keys, dsKey(k))
		ents = append(ents, &dsEntity{V: string(valueFor(k, d.vsz))})
		if len(keys) == 500 || i == d.n-1 {
			if _, err := d.direct.PutMulti(ctx, keys, ents); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			keys, ents = keys[:0], ents[:0]
		}
	}
	return nil
}

// close deletes the items and closes the client.
func (d *datastoreData) close() error {
	var errs []error
	ctx := context.Background()
	for i := uint64(0); i < d.n; i += 500 {
		var keys []*datastore.Key
		for j := i; j < min(i+500, d.n); j++ {
			keys = append(keys, dsKey(itemKey(j)))
		}
		if err := d.direct.DeleteMulti(ctx, keys); err != nil {
			errs = append(errs, err)
			break
		}
	}
	errs = append(errs, d.direct.Close(), d.remote.close(), os.RemoveAll(d.dir))
	return errors.Join(errs...)
}

func (d *datastoreData) items() uint64  { return d.n }
func (d *datastoreData) valueSize() int { return d.vsz }
func (d *datastoreData) real() bool     { return true }

func (d *datastoreData) open(ctx context.Context, spec stackSpec) (cacheStack, error) {
	dir, err := os.MkdirTemp(d.dir, "run-")
	if err != nil {
		return nil, err
	}
	return openProcStack(ctx, d.o, d, spec, dir)
}

func (d *datastoreData) nemoEnv() ([]string, string) {
	return []string{
		"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + d.project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + d.far,
		"NEMO_LISTEN_AZURE_TABLE=off", "NEMO_LISTEN_DATASTORE=127.0.0.1:0",
	}, "datastore"
}

func (d *datastoreData) proxy() (string, string) { return "grpc", d.far }
func (d *datastoreData) backendAddr() string     { return d.host }
func (d *datastoreData) directAddr() string      { return d.far }

func (d *datastoreData) client(ctx context.Context, addr string, sent *atomic.Uint64) (reader, func() error, error) {
	c, err := dsClient(ctx, addr, d.project)
	if err != nil {
		return nil, nil, err
	}
	return datastoreClient{client: c, sent: sent}, c.Close, nil
}

// datastoreClient reads and writes the items through the Go client.
type datastoreClient struct {
	client *datastore.Client
	sent   *atomic.Uint64
}

func (c datastoreClient) get(ctx context.Context, key []byte) (int, bool, error) {
	c.sent.Add(1)
	var ent dsEntity
	err := c.client.Get(ctx, dsKey(key), &ent)
	if errors.Is(err, datastore.ErrNoSuchEntity) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return len(ent.V), true, nil
}

// put writes the entity (a Commit with one upsert).
func (c datastoreClient) put(ctx context.Context, key, val []byte) error {
	c.sent.Add(1)
	_, err := c.client.Put(ctx, dsKey(key), &dsEntity{V: string(val)})
	return err
}

// scan is a kind query with __key__ bounds and a limit, as an
// application reads a key range.
func (c datastoreClient) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	q := datastore.NewQuery(dsKind).
		FilterField("__key__", ">=", dsKey(start)).
		FilterField("__key__", "<", dsKey(end)).
		Limit(limit)
	c.sent.Add(1)
	var keys [][]byte
	it := c.client.Run(ctx, q)
	for {
		var ent dsEntity
		k, err := it.Next(&ent)
		if errors.Is(err, iterator.Done) {
			return keys, nil
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, []byte(k.Name))
	}
}
