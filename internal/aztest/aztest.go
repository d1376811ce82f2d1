package aztest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/nemocache/nemo/internal/testenv"
)

// Azurite's development account and its well-known key (Azurite's default,
// published in its README).
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// EnvAzurite names the variable holding Azurite's table endpoint, e.g.
// http://127.0.0.1:10002/devstoreaccount1.
const EnvAzurite = "NEMO_TEST_AZURITE"

// Azurite returns the Azurite table endpoint (path-style, ending in the
// account name, no trailing slash). Without NEMO_TEST_AZURITE the test
// fails (testenv.Missing: skipped under -short outside CI).
func Azurite(tb testing.TB) string {
	tb.Helper()
	u := strings.TrimRight(os.Getenv(EnvAzurite), "/")
	if u == "" {
		testenv.Missing(tb, EnvAzurite+" is unset (Azurite)", "run the tests through .ci/test, which starts Azurite, or start it and export the variable")
	}
	return u
}

// ConnectionString is the connection string of the development account at
// serviceURL.
func ConnectionString(serviceURL, key string) string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s;", Account, key, serviceURL)
}

var seq atomic.Uint64

// TableName returns a table name no other test run uses: prefix (letters
// and digits, starting with a letter) plus a time-derived suffix.
func TableName(prefix string) string {
	n := fmt.Sprintf("%s%x%d", prefix, time.Now().UnixNano()&0xffffffffff, seq.Add(1))
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// Status returns the HTTP status and Azure error code of an SDK error:
// 0, "" for nil; -1 and the error's text for one that is not a response.
func Status(err error) (int, string) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode, re.ErrorCode
	}
	if err != nil {
		return -1, err.Error()
	}
	return 0, ""
}
