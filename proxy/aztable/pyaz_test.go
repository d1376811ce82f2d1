package aztable

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/testenv"
)

// The Python Tables SDK and the Azure CLI, as Debian packages them
// (python3-azure for /usr/bin/python3, azure-cli), which .ci/test
// installs when they are missing. Both talk to nemo as to Azure; each
// conversation runs against Azurite too, and nemo's transcript must equal
// Azurite's.

// python is /usr/bin/python3 with azure.data.tables importable.
func python(t *testing.T) string {
	const py = "/usr/bin/python3"
	out, err := exec.Command(py, "-c", "import azure.data.tables").CombinedOutput()
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("%s cannot import azure.data.tables: %v\n%s", py, err, out), "apt-get install python3-azure (.ci/test does)")
	}
	return py
}

// azCLI is the az command.
func azCLI(t *testing.T) string {
	az, err := exec.LookPath("az")
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("az is not installed: %v", err), "apt-get install azure-cli (.ci/test does)")
	}
	return az
}

// transcripts runs conv against Azurite first and then against each
// nemo endpoint in eps, and fails where a nemo transcript differs from
// Azurite's. conv returns one line per step.
func transcripts(t *testing.T, eps []endpoint, conv func(t *testing.T, url string) []string) {
	var want []string
	t.Run("azurite", func(t *testing.T) {
		want = conv(t, aztest.Azurite(t))
		t.Logf("Azurite's transcript:\n%s", strings.Join(want, "\n"))
	})
	if len(want) == 0 {
		t.Fatal("no transcript from Azurite")
	}
	for _, ep := range eps {
		t.Run(ep.name, func(t *testing.T) {
			got := conv(t, ep.start(t))
			for i := range max(len(got), len(want)) {
				g, w := at(got, i), at(want, i)
				if g != w {
					t.Errorf("step %d:\n nemo:    %s\n Azurite: %s", i+1, g, w)
				}
			}
		})
	}
}

func at(lines []string, i int) string {
	if i >= 0 && i < len(lines) {
		return lines[i]
	}
	return "(none)"
}

// TestPythonSDK runs testdata/py/smoke.py: tables, typed entities,
// conditional writes, batches (one failing), filtered and paged queries
// and a deleted table, through the Python SDK with its retries off.
func TestPythonSDK(t *testing.T) {
	py := python(t)
	var eps []endpoint
	for _, ep := range endpoints(t) {
		if !ep.azurite {
			eps = append(eps, ep)
		}
	}
	transcripts(t, eps, func(t *testing.T, url string) []string {
		cmd := exec.CommandContext(ctxT(t), py, "testdata/py/smoke.py")
		cmd.Env = append(os.Environ(), "NEMO_URL="+url, "NEMO_ACCOUNT="+aztest.Account, "NEMO_KEY="+aztest.Key,
			"NEMO_TABLE="+aztest.TableName("py"))
		cmd.Env = append(cmd.Env, caEnv(t)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("smoke.py: %v\n%s\n%s", err, out, stderr.Bytes())
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	})
}

// azStep is one az invocation: its arguments with {T} for the table's
// name and {ETAG} for the ETag the last step that printed one printed.
type azStep []string

// azSteps is the CLI's conversation: table and entity commands,
// including the failures a user meets (exists, not found, a stale ETag).
var azSteps = []azStep{
	{"storage", "table", "create", "-n", "{T}"},
	{"storage", "table", "create", "-n", "{T}", "--fail-on-exist"},
	{"storage", "table", "exists", "-n", "{T}"},
	{"storage", "entity", "insert", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r1", "n=1", "n@odata.type=Edm.Int32",
		"big=1234567890123", "big@odata.type=Edm.Int64", "s=héllo 'q'", "when=2024-05-06T07:08:09.1234567Z", "when@odata.type=Edm.DateTime"},
	{"storage", "entity", "insert", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r1", "n=9"},
	{"storage", "entity", "show", "-t", "{T}", "--partition-key", "p", "--row-key", "r1"},
	{"storage", "entity", "merge", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r1", "extra=x"},
	{"storage", "entity", "show", "-t", "{T}", "--partition-key", "p", "--row-key", "r1", "--select", "extra", "n"},
	{"storage", "entity", "replace", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r1", "n=2", "n@odata.type=Edm.Int32", "--if-match", "{ETAG}"},
	{"storage", "entity", "replace", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r1", "n=3", "n@odata.type=Edm.Int32", "--if-match", "{ETAG0}"},
	{"storage", "entity", "insert", "-t", "{T}", "-e", "PartitionKey=p", "RowKey=r2", "n=5", "n@odata.type=Edm.Int32", "--if-exists", "replace"},
	{"storage", "entity", "query", "-t", "{T}", "--filter", "PartitionKey eq 'p' and n ge 2", "--num-results", "1"},
	{"storage", "entity", "query", "-t", "{T}", "--filter", "PartitionKey eq 'p'", "--select", "n"},
	{"storage", "entity", "delete", "-t", "{T}", "--partition-key", "p", "--row-key", "r1"},
	{"storage", "entity", "show", "-t", "{T}", "--partition-key", "p", "--row-key", "r1"},
	{"storage", "table", "list"},
	{"storage", "table", "delete", "-n", "{T}"},
	{"storage", "table", "exists", "-n", "{T}"},
	{"storage", "entity", "show", "-t", "{T}", "--partition-key", "p", "--row-key", "r2"},
}

// TestAzureCLI runs azSteps with az against nemo over the embedded store
// and over Azurite, as against Azurite.
func TestAzureCLI(t *testing.T) {
	az := azCLI(t)
	eps := []endpoint{
		{"nemo-embedded", false, func(t *testing.T) string { return overEmbedded(t).URL }},
		{"nemo-azurite", false, func(t *testing.T) string {
			// The conversation lists every table of the account, which
			// other tests share: only the tables named cli... are this
			// test's to check against Azurite at the end.
			n := overAzurite(t)
			n.OthersWriteKey = othersTables("cli")
			return n.URL
		}},
	}
	transcripts(t, eps, func(t *testing.T, url string) []string {
		cs := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s;", aztest.Account, aztest.Key, url)
		table := aztest.TableName("cli")
		home := t.TempDir() // az keeps its configuration and logs here
		var lines []string
		var etags []string
		for _, s := range azSteps {
			args := make([]string, 0, len(s)+2)
			for _, a := range s {
				a = strings.ReplaceAll(a, "{T}", table)
				a = strings.ReplaceAll(a, "{ETAG0}", at(etags, 0))
				a = strings.ReplaceAll(a, "{ETAG}", at(etags, len(etags)-1))
				args = append(args, a)
			}
			args = append(args, "--connection-string", cs, "-o", "json")
			cmd := exec.CommandContext(ctxT(t), az, args...)
			cmd.Env = append(os.Environ(), "AZURE_CONFIG_DIR="+home, "AZURE_CORE_COLLECT_TELEMETRY=no", "AZURE_CORE_ONLY_SHOW_ERRORS=true")
			cmd.Env = append(cmd.Env, caEnv(t)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil {
				if _, ok := err.(*exec.ExitError); !ok {
					t.Fatalf("az %s: %v", strings.Join(s, " "), err)
				}
			}
			line, etag := azOutcome(t, table, cmd.ProcessState.ExitCode(), stdout.Bytes(), stderr.String())
			if etag != "" {
				etags = append(etags, etag)
			}
			lines = append(lines, strings.Join(s[:3], " ")+": "+line)
		}
		return lines
	})
}

var (
	etagRE = regexp.MustCompile(`W/\\?"datetime'[^']*'\\?"`)
	// The x-ms-version answered is the version that ran the request:
	// Azure (and nemo) answer the request's (the CLI asks for 2019-02-02),
	// Azurite always its own newest.
	timeRE = regexp.MustCompile(`"(Timestamp|date|version)": "[^"]*"`)
)

// azOutcome is one az step's outcome made independent of the run: the
// exit code, the JSON it printed with ETags, timestamps, the service
// version and the table's
// name replaced (and, for a table list, only whether the table was in
// it), and the first line of its error; also the ETag it printed, if any.
func azOutcome(t *testing.T, table string, code int, stdout []byte, stderr string) (line, etag string) {
	out := strings.TrimSpace(string(stdout))
	var list []map[string]any
	if json.Unmarshal(stdout, &list) == nil && len(list) > 0 && list[0]["name"] != nil {
		out = fmt.Sprintf("table listed: %v", slices.ContainsFunc(list, func(m map[string]any) bool { return m["name"] == table }))
	}
	if m := etagRE.FindString(out); m != "" {
		etag = strings.ReplaceAll(m, `\"`, `"`)
	}
	out = etagRE.ReplaceAllString(out, "ETAG")
	out = timeRE.ReplaceAllString(out, `"$1": "-"`)
	out = strings.ReplaceAll(out, table, "TABLE")
	out = strings.Join(strings.Fields(out), " ")
	errLine, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
	if code == 0 && errLine != "" {
		t.Logf("az wrote to stderr: %s", stderr)
		errLine = ""
	}
	return fmt.Sprintf("exit %d %s %s", code, out, errLine), etag
}
