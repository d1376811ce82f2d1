package txn

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

var crashCycles = flag.Int("crash.cycles", 20, "kill -9 cycles in TestCrashRecovery")

const crashKS = adapters.Keyspace("crash")

// openDurable opens the store, a small buffer (so eviction and write-back
// run all the time) and an engine with a WAL in dir, releasing commit locks
// early (Options.EarlyRelease) when NEMO_CRASH_EARLY is set.
func openDurable(dir string, nosyncStore bool) (*Engine, *embedded.Store, *cache.Buffer, error) {
	st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{NoSync: nosyncStore})
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := cache.New(st, cache.Options{MaxBytes: 64 << 10, MaxKeyBytes: 64, MaxDirtyAge: 20 * time.Millisecond, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	b.OpenKeyspace(crashKS)
	wo := wal.Options{Dir: filepath.Join(dir, "wal")}
	wo.SegmentSize = 256 << 10
	e, err := New(b, Options{WAL: &wo, CheckpointInterval: 50 * time.Millisecond, EarlyRelease: os.Getenv("NEMO_CRASH_EARLY") != ""})
	if err != nil {
		b.Close()
		st.Close()
		return nil, nil, nil, err
	}
	return e, st, b, nil
}

func crashKey(i int, part string) []byte { return []byte(fmt.Sprintf("t/%09d/%s", i, part)) }

// TestMain runs the crash child instead of the tests when asked to.
func TestMain(m *testing.M) {
	if dir := os.Getenv("NEMO_CRASH_DIR"); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild is the child process of TestCrashRecovery: it commits
// three-key transactions from 8 goroutines and prints "ack N" after each
// commit returns, until it is killed.
func crashChild(dir string) {
	start, _ := strconv.Atoi(os.Getenv("NEMO_CRASH_START"))
	e, _, _, err := openDurable(dir, false)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	var next atomic.Int64
	next.Store(int64(start))
	var out sync.Mutex
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				v := []byte(strconv.Itoa(i))
				err := e.Run(ctx, false, func(tx *Txn) error {
					for _, p := range []string{"a", "b", "c"} {
						if err := tx.Insert(ctx, crashKS, crashKey(i, p), v); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					fmt.Println("error:", err)
					os.Exit(4)
				}
				out.Lock()
				fmt.Printf("ack %d\n", i)
				out.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestCrashRecovery kills a writing child with SIGKILL at random moments,
// restarts it, and checks that every acknowledged transaction is readable
// through the engine after recovery, that no transaction is half visible,
// and that after a drain the store alone holds every acknowledged write;
// once with commits holding their locks to the fsync, once with early lock
// release (the kill may land between a release and its fsync).
func TestCrashRecovery(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("early=%v", early), func(t *testing.T) {
			if early {
				t.Setenv("NEMO_CRASH_EARLY", "1") // the children inherit it
			}
			crashRecovery(t)
		})
	}
}

func crashRecovery(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	acked := map[int]bool{}
	start := 0
	for cycle := 0; cycle < *crashCycles; cycle++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "NEMO_CRASH_DIR="+dir, "NEMO_CRASH_START="+strconv.Itoa(start))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		killAt := time.Duration(50+rng.Intn(250)) * time.Millisecond
		var timer <-chan time.Time
		n := 0
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				switch {
				case l == "ready":
				case strings.HasPrefix(l, "ack "):
					i, _ := strconv.Atoi(strings.TrimPrefix(l, "ack "))
					acked[i] = true
					if n == 0 {
						// The kill comes at a random moment after writing
						// has begun (counting from "ready" instead lost
						// whole cycles on a loaded machine, where the first
						// commit can take longer than the shortest delay).
						timer = time.After(killAt)
					}
					n++
				default:
					t.Fatalf("cycle %d: child said %q", cycle, l)
				}
			case <-timer:
				cmd.Process.Signal(syscall.SIGKILL)
				timer = nil
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("cycle %d: child hung", cycle)
			}
		}
		cmd.Wait()
		if n == 0 {
			t.Fatalf("cycle %d: child acknowledged nothing", cycle)
		}
		start += 1_000_000
		verifyCrash(t, dir, acked, false)
	}
	verifyCrash(t, dir, acked, true)
	t.Logf("%d cycles, %d acknowledged transactions, all recovered", *crashCycles, len(acked))
}

func verifyCrash(t *testing.T, dir string, acked map[int]bool, drain bool) {
	t.Helper()
	ctx := context.Background()
	e, st, b, err := openDurable(dir, false)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	defer st.Close()
	defer b.Close()
	for i := range acked {
		for _, p := range []string{"a", "b", "c"} {
			v, ok, err := e.Get(ctx, crashKS, crashKey(i, p), ReadLatest)
			if err != nil || !ok || string(v) != strconv.Itoa(i) {
				t.Fatalf("acknowledged txn %d key %s: got %q %v %v", i, p, v, ok, err)
			}
		}
	}
	recs, next, err := e.Scan(ctx, crashKS, nil, nil, 0, ReadSerializable)
	if err != nil || next != nil {
		t.Fatalf("scan: %v %v", err, next)
	}
	parts := map[string]int{}
	for _, r := range recs {
		f := strings.Split(string(r.Key), "/")
		parts[f[1]]++
	}
	for id, c := range parts {
		if c != 3 {
			t.Fatalf("transaction %s is partially visible: %d of 3 keys", id, c)
		}
	}
	if !drain {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := e.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	for i := range acked {
		vals, err := storetest.Values(st.Get(ctx, crashKS, [][]byte{crashKey(i, "a"), crashKey(i, "b"), crashKey(i, "c")}))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if string(v) != strconv.Itoa(i) {
				t.Fatalf("after drain the store lacks txn %d: %q", i, v)
			}
		}
	}
	b.Close() // Check wants a quiescent buffer: stop the evictor first
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
