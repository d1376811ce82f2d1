package aztable

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// TestCatalogTableDeletedElsewhere is what made the differential's
// buffer check fail now and then ("clean record ... is absent from the
// store" in __tables__), made deterministic: a nemo in coherence
// exclusive lists the account's tables into its catalog and does not see
// a table deleted elsewhere (docs/coherence.md: tables created or deleted
// elsewhere show after a restart, or within coherence.max_staleness), and
// the differential's Azurite side is such a writer in the same account.
// The check reports that table's entry, and with the tables of others
// named (cache.CheckOptions.OthersWriteKey) it finds nemo's own entry
// sound.
func TestCatalogTableDeletedElsewhere(t *testing.T) {
	ctx := ctxT(t)
	n := startNemo(t, azuriteStore(t), cache.Options{})
	svc := service(t, n.URL, aztest.Key)
	direct := service(t, aztest.Azurite(t), aztest.Key)
	mine, other := aztest.TableName("cm"), aztest.TableName("co")
	if _, err := svc.CreateTable(ctx, mine, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = svc.DeleteTable(ctxT(t), mine, nil) })
	if _, err := direct.CreateTable(ctx, other, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(ctxT(t), other, nil) })
	listed, err := listTables(ctx, &side{svc: svc, prefix: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(slices.Concat(listed...), strings.TrimPrefix(other, "c")) {
		t.Fatalf("nemo listed %v, without %s, which Azurite holds", listed, other)
	}
	if _, err := direct.DeleteTable(ctx, other, nil); err != nil {
		t.Fatal(err)
	}
	err = n.Buf.CheckWith(ctx, cache.CheckOptions{Equal: tablecodec.SameEntity})
	if want := fmt.Sprintf("clean record %q is absent from the store", tablecodec.TableKey(other)); !errors.Is(err, cache.ErrInvariant) || !strings.Contains(err.Error(), want) {
		t.Fatalf("check after %s was deleted behind nemo's back: %v, want %q", other, err, want)
	}
	n.OthersWriteKey = othersTables(mine)
	if err := n.Buf.CheckWith(ctx, cache.CheckOptions{Equal: tablecodec.SameEntity, OthersWriteKey: n.OthersWriteKey}); err != nil {
		t.Fatalf("check of nemo's own table: %v", err)
	}
}

// TestCatalogUnderLostReplies: table creates and deletes whose replies
// the contract loses after Azurite applied them (the adapter's retry then
// meets 409 TableAlreadyExists or 404), and table listings whose pages it
// cuts short or empty, leave nemo's catalog equal to Azurite's table
// list, in both coherence modes: each create and delete is answered as
// Azurite answers it, the listing through nemo and Azurite's own agree
// after each, a table's entities answer TableNotFound exactly when it is
// gone, and the buffer check at the end compares the test's catalog
// entries with Azurite.
func TestCatalogUnderLostReplies(t *testing.T) {
	for _, shared := range []bool{false, true} {
		mode, start := "exclusive", startNemo
		if shared {
			mode, start = "shared", startShared
		}
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t)
			c := contract.New(contract.Config{Seed: 1, ShortRate: 0.9, EmptyRate: 0.5})
			n := start(t, contractStore(t, c, shared), cache.Options{})
			prefix := aztest.TableName("cl")
			n.OthersWriteKey = othersTables(prefix)
			nemoSide := &side{svc: service(t, n.URL, aztest.Key), prefix: prefix}
			azSide := &side{svc: service(t, aztest.Azurite(t), aztest.Key), prefix: prefix}
			t.Cleanup(func() {
				for _, l := range []string{"a", "b"} {
					_, _ = nemoSide.svc.DeleteTable(ctxT(t), prefix+l, nil)
				}
			})
			live := map[string]bool{}
			for i, op := range []struct {
				create bool
				table  string
			}{{true, "a"}, {true, "b"}, {false, "a"}, {true, "a"}, {false, "b"}, {false, "a"}} {
				lost := c.Stats().Lost
				c.LoseNext(1)
				var err error
				if op.create {
					_, err = nemoSide.svc.CreateTable(ctx, prefix+op.table, nil)
				} else {
					_, err = nemoSide.svc.DeleteTable(ctx, prefix+op.table, nil)
				}
				if err != nil {
					t.Fatalf("op %d (create %v %s) with its reply lost: %v", i, op.create, op.table, err)
				}
				if c.Stats().Lost == lost {
					t.Fatalf("op %d: the contract lost no reply", i)
				}
				live[op.table] = op.create
				var want [][]string // one table a page ($top 1); no table, one empty page
				for _, l := range []string{"a", "b"} {
					if live[l] {
						want = append(want, []string{l})
					}
				}
				if want == nil {
					want = [][]string{nil}
				}
				gotNemo, err1 := listTables(ctx, nemoSide)
				gotAz, err2 := listTables(ctx, azSide)
				if err1 != nil || err2 != nil || !reflect.DeepEqual(gotNemo, want) || !reflect.DeepEqual(gotAz, want) {
					t.Fatalf("op %d: tables through nemo %v (%v), in Azurite %v (%v), want %v", i, gotNemo, err1, gotAz, err2, want)
				}
				for _, l := range []string{"a", "b"} {
					_, err := nemoSide.svc.NewClient(prefix+l).GetEntity(ctx, "p", "r", nil)
					st, code := aztest.Status(err)
					if wantCode := map[bool]string{true: "ResourceNotFound", false: "TableNotFound"}[live[l]]; st != http.StatusNotFound || code != wantCode {
						t.Fatalf("op %d: an entity of table %s: %d %s, want 404 %s", i, l, st, code, wantCode)
					}
				}
			}
			t.Logf("contract: %+v", c.Stats())
		})
	}
}
