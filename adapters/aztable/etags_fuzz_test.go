package aztable

import (
	"testing"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// FuzzDatetimeETag: parseDatetimeETag accepts exactly the ETags
// datetimeETag spells (any other spelling is kept as text, so two
// spellings never stand for one version), and inverts it for every
// timestamp Azure can hold.
func FuzzDatetimeETag(f *testing.F) {
	f.Add(`W/"datetime'2026-12-02T08%3A09%3A46.2133931Z'"`, int64(0))
	f.Add(`W/"datetime'2026-12-02T08:09:46.2133931Z'"`, int64(638686229862133931))
	f.Add(`W/"datetime'9999-12-31T23%3A59%3A59.9999999Z'"`, int64(-1))
	f.Add(`"0x8DC"`, int64(1))
	f.Fuzz(func(t *testing.T, etag string, ticks int64) {
		if got, ok := parseDatetimeETag(etag); ok && datetimeETag(got) != etag {
			t.Fatalf("parseDatetimeETag(%q) = %d, which spells %q", etag, got, datetimeETag(got))
		}
		// Azure's DateTime range, 0001-01-01 to 9999-12-31, in ticks.
		lo, hi := tablecodec.Ticks(tablecodec.FromTicks(0)), tablecodec.Ticks(tablecodec.FromTicks(0).AddDate(9999, 0, 0))-1
		if ticks < lo || ticks > hi {
			return
		}
		if back, ok := parseDatetimeETag(datetimeETag(ticks)); !ok || back != ticks {
			t.Fatalf("datetimeETag(%d) = %q parses to %d, %v", ticks, datetimeETag(ticks), back, ok)
		}
	})
}
