package datastore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/proxy/datastore/internal/gql"
)

// gqlCorpus reads testdata/gql/corpus.txt (its format is described there).
func gqlCorpus(t testing.TB) []*datastorepb.GqlQuery {
	f, err := os.Open("testdata/gql/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*datastorepb.GqlQuery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		g := &datastorepb.GqlQuery{AllowLiterals: true, QueryString: line}
		switch word, rest, _ := strings.Cut(line, " "); word {
		case "nolit":
			g.AllowLiterals, g.QueryString = false, rest
		case "quoted":
			if g.QueryString, err = strconv.Unquote(rest); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case "json":
			g = &datastorepb.GqlQuery{}
			if err := protojson.Unmarshal([]byte(rest), g); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		}
		out = append(out, g)
	}
	return out
}

// mutate damages a query string at random: the parser's errors for
// almost-right queries are the ones clients see.
func mutate(r *rand.Rand, q string) string {
	frags := []string{"(", ")", ",", "'", "\"", "`", "@", "@1", "@x", " AND ", " OR ", "=", "<", ">=", "!=", "KEY(", " LIMIT ",
		" OFFSET ", " ", "\n", "-", ".", "1", "-2", "1e", "2.5", "\\", "ARRAY(", "DISTINCT ", "*", "FIRST(", " ON ", " HAS ",
		" NOT ", " IN ", " IS NULL", "+", "x", "__key__", " ORDER BY ", " WHERE ", " FROM ", "SELECT ", "NULL", "é", "#", ";"}
	u := []rune(q)
	for n := 1 + r.IntN(2); n > 0; n-- {
		i := r.IntN(len(u) + 1)
		switch r.IntN(4) {
		case 0:
			if len(u) > 0 {
				j := min(len(u), i+1+r.IntN(4))
				if i < j {
					u = append(u[:i:i], u[j:]...)
				}
			}
		case 1:
			if i < len(u) {
				j := min(len(u), i+1+r.IntN(6))
				u = append(u[:j:j], append(slicesClone(u[i:j]), u[j:]...)...)
			}
		default:
			f := []rune(frags[r.IntN(len(frags))])
			u = append(u[:i:i], append(f, u[i:]...)...)
		}
	}
	return string(u)
}

func slicesClone(r []rune) []rune { return append([]rune(nil), r...) }

// parserMessage matches the messages of the service's GQL parser (as
// opposed to its later validation of the parsed query).
var parserMessage = regexp.MustCompile(`^(Encountered |Lexical error|Absent |Unused positional|Invalid (integer|double|blob|datetime|binding|positional)|Disallowed literal|Unknown (function|partition|aggregator)|Unsupported function|Unexpected |The (limit|offset) |Binding site|Expected |A key may|A key's|GROUP BY|DISTINCT ON|Cloud Datastore only|Distinct projection|Unimplemented GQL|GQL query parameter|The GQL query parameter|A GQL query parameter|Expecting )`)

// TestGQLParserAsTheEmulator runs every GQL string of the corpus, and
// seeded random damage to each, through nemo's parser and the emulator's:
// where nemo's parser refuses a query the emulator must refuse it with the
// same message, and where it accepts one the emulator must either build
// the same structured query (it answers with the parsed query) or refuse
// it for a reason that is not its parser's. The seed is fixed;
// NEMO_GQL_SEED=random (or a number) with NEMO_GQL_MUTATIONS=n explores
// further (40 mutations a line over seeds 1 to 7 all passed).
func TestGQLParserAsTheEmulator(t *testing.T) {
	emu := pbClient(t, dstest.Emulator(t))
	project := dstest.Project(t)
	partition := &datastorepb.PartitionId{ProjectId: project, NamespaceId: "nsA"}
	seed, mutations := envSeed(t, "NEMO_GQL_SEED", 12), 8
	if env := os.Getenv("NEMO_GQL_MUTATIONS"); env != "" {
		var err error
		if mutations, err = strconv.Atoi(env); err != nil {
			t.Fatalf("NEMO_GQL_MUTATIONS=%q: %v", env, err)
		}
	}
	r := rand.New(rand.NewPCG(seed, 4))
	var queries []*datastorepb.GqlQuery
	for _, g := range gqlCorpus(t) {
		queries = append(queries, g)
		for i := 0; i < mutations; i++ {
			m := proto.Clone(g).(*datastorepb.GqlQuery)
			m.QueryString = mutate(r, g.QueryString)
			queries = append(queries, m)
		}
	}
	ctx := context.Background()
	var same, refusedLater, typeErrors int
	for _, g := range queries {
		ours, err := gql.Query(g, partition)
		resp, emuErr := emu.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, PartitionId: partition,
			QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: g}})
		switch {
		case err != nil:
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%q: nemo's error %v is not INVALID_ARGUMENT", g.QueryString, err)
			}
			// The emulator fails without a message (UNKNOWN) on a query
			// sent to the wrong method and on a datetime outside the
			// range of timestamps; nemo's message is the service's for
			// the first, its own for the second.
			if msg := status.Convert(err).Message(); status.Code(emuErr) == codes.Unknown &&
				(strings.HasPrefix(msg, "Expecting ") || strings.HasPrefix(msg, "Invalid datetime text (out of range)")) {
				typeErrors++
				continue
			}
			if status.Code(emuErr) != codes.InvalidArgument || status.Convert(emuErr).Message() != status.Convert(err).Message() {
				t.Errorf("%s\nnemo:     %q\nemulator: %v %q", describe(g), status.Convert(err).Message(), status.Code(emuErr), status.Convert(emuErr).Message())
			}
		case emuErr != nil:
			if msg := status.Convert(emuErr).Message(); parserMessage.MatchString(msg) {
				t.Errorf("%s\nnemo parsed it, the emulator's parser refused it: %q\nnemo: %v", describe(g), msg, prototext.Format(ours))
			}
			refusedLater++
		default:
			if !proto.Equal(ours, resp.GetQuery()) {
				t.Errorf("%s\nnemo:     %v\nemulator: %v", describe(g), prototext.Format(ours), prototext.Format(resp.GetQuery()))
			}
			same++
		}
	}
	t.Logf("%d GQL strings: %d parsed alike, %d refused by both parsers alike, %d refused by the emulator after parsing, %d where it fails without a message",
		len(queries), same, len(queries)-same-refusedLater-typeErrors, refusedLater, typeErrors)
}

// envSeed is the seed named by env: unset, def; "random", the clock; else
// the number.
func envSeed(t *testing.T, env string, def uint64) uint64 {
	switch v := os.Getenv(env); v {
	case "":
		return def
	case "random":
		seed := uint64(time.Now().UnixNano())
		t.Logf("%s=%d", env, seed)
		return seed
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		return n
	}
}

func describe(g *datastorepb.GqlQuery) string {
	if len(g.GetNamedBindings())+len(g.GetPositionalBindings()) > 0 || !g.GetAllowLiterals() {
		b, _ := protojson.Marshal(g)
		return string(b)
	}
	return fmt.Sprintf("%q", g.GetQueryString())
}
