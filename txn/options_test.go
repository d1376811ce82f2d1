package txn

import (
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/wal"
)

func TestOptionsEnsureDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.Phantom != NextKey || o.Mode != WriteBack || o.PCLPartitionSize != 1<<48 || o.Retries != 8 ||
		o.IdleTimeout != 30*time.Second || o.CheckpointInterval != time.Minute || o.CheckpointBytes != 64<<20 || o.DirtyWait != 2*time.Second || o.Logger == nil {
		t.Fatalf("defaults not applied: %+v", o)
	}
	again := o
	again.EnsureDefaults()
	if again != o {
		t.Errorf("EnsureDefaults is not idempotent: %+v, then %+v", o, again)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	set := Options{Phantom: PCL, Mode: WriteThrough, Retries: 1}
	set.EnsureDefaults()
	if set.Phantom != PCL || set.Mode != WriteThrough || set.Retries != 1 {
		t.Errorf("EnsureDefaults overwrote set fields: %+v", set)
	}
}

func TestOptionsValidateReportsAll(t *testing.T) {
	o := Options{Phantom: "gap", Mode: "sideways", IdleTimeout: -1, Retries: -1, CheckpointInterval: -1, CheckpointBytes: -1}
	before := o
	err := o.Validate()
	if o != before {
		t.Errorf("Validate changed the options: %+v", o)
	}
	for _, want := range []string{
		`txn: phantom "gap": want nextkey or pcl`,
		"idle timeout", "retries",
		`txn: write mode "sideways": want back or through`,
		"checkpoint interval", "checkpoint bytes",
	} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
	if err := (Options{Mode: WriteThrough, WAL: &wal.Options{Dir: "d"}}).Validate(); err == nil || !contains(err.Error(), "takes no commit log") {
		t.Errorf("write-through with a WAL: %v", err)
	}
}

func TestEnumsValid(t *testing.T) {
	for _, p := range enum.Phantoms() {
		if !p.Valid() {
			t.Errorf("%q not Valid", p)
		}
	}
	for _, m := range enum.WriteModes() {
		if !m.Valid() {
			t.Errorf("%q not Valid", m)
		}
	}
	if Phantom("").Valid() || Phantom("gap").Valid() || WriteMode("").Valid() || WriteMode("x").Valid() {
		t.Error("unknown value Valid")
	}
}
