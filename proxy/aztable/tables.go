package aztable

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf16"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/proxy/aztable/odata"
	"github.com/nemocache/nemo/txn"
)

// validTableName applies Azure's rule, checked in the service's order: 3
// to 63 characters (OutOfRangeInput), not the reserved name "tables"
// (InvalidInput), letters and digits starting with a letter
// (InvalidResourceName).
func validTableName(name string) *apiError {
	if n := len(utf16.Encode([]rune(name))); n < 3 || n > 63 {
		return errTableNameLength
	}
	if strings.EqualFold(name, "tables") {
		return errInvalidInput
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return errBadTableName
		}
	}
	return nil
}

// tableJSON writes one table in the service's shape for the level.
func (rq *request) tableJSON(dst []byte, name string, withContext bool) []byte {
	base := rq.baseURL()
	dst = append(dst, '{')
	if withContext && rq.level != tablecodec.NoMetadata {
		dst = appendMember(dst, "odata.metadata", base+"$metadata#Tables/@Element")
		dst = append(dst, ',')
	}
	if rq.level == tablecodec.FullMetadata {
		dst = appendMember(dst, "odata.type", rq.f.opts.Account+".Tables")
		dst = append(dst, ',')
		dst = appendMember(dst, "odata.id", base+"Tables('"+name+"')")
		dst = append(dst, ',')
		dst = appendMember(dst, "odata.editLink", "Tables('"+name+"')")
		dst = append(dst, ',')
	}
	dst = appendMember(dst, "TableName", name)
	return append(dst, '}')
}

func appendMember(dst []byte, k, v string) []byte {
	kb, _ := json.Marshal(k)
	vb, _ := json.Marshal(v)
	dst = append(dst, kb...)
	dst = append(dst, ':')
	return append(dst, vb...)
}

func (f *Frontend) createTable(rq *request) *apiError {
	if e := needContentType(rq.r.Header); e != nil {
		return e
	}
	body, e := rq.body()
	if e != nil {
		return e
	}
	var in struct {
		TableName *string `json:"TableName"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return errInvalidInput.because(err)
	}
	if in.TableName == nil {
		return errNeedKeys
	}
	name := *in.TableName
	if e := validTableName(name); e != nil {
		return e
	}
	ctx := rq.r.Context()
	err := f.eng.Run(ctx, false, func(t *txn.Txn) error {
		return t.CreateKeyspace(ctx, tablecodec.TablesKeyspace, tablecodec.TableKey(name), adapters.Keyspace(name))
	})
	if errors.Is(err, txn.ErrExists) {
		return errTableExists.because(err)
	}
	if err != nil {
		return engineError(err)
	}
	if !preferContent(rq.r, rq.w.Header(), true) {
		rq.w.WriteHeader(http.StatusNoContent)
		return nil
	}
	rq.reply(http.StatusCreated, rq.tableJSON(nil, name, true))
	return nil
}

// deleteTable drops the table: its catalog entry and every entity,
// unflushed ones included, in one logged transaction; the table is deleted
// in the backend before any later backend call (see txn.Txn.DropKeyspace).
func (f *Frontend) deleteTable(rq *request, name string) *apiError {
	ctx := rq.r.Context()
	err := f.eng.Run(ctx, false, func(t *txn.Txn) error {
		_, err := t.DropKeyspace(ctx, tablecodec.TablesKeyspace, tablecodec.TableKey(name))
		return err
	})
	if errors.Is(err, txn.ErrNotFound) {
		return errResourceNotFound.because(err)
	}
	if err != nil {
		return engineError(err)
	}
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (f *Frontend) getTable(rq *request, name string) *apiError {
	ks, ok, err := f.eng.LookupKeyspace(rq.r.Context(), tablecodec.TablesKeyspace, tablecodec.TableKey(name))
	if err != nil {
		return engineError(err)
	}
	if !ok {
		return errResourceNotFound
	}
	rq.reply(http.StatusOK, rq.tableJSON(nil, string(ks), true))
	return nil
}

// parseTop reads $top: 1 to 1000 (Azure's page limit), 0 when absent.
func parseTop(q url.Values) (int, *apiError) {
	s := q.Get("$top")
	if s == "" {
		return 0, nil
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' || n > 1000 {
			return 0, errInvalidQueryParam
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 1 || n > 1000 {
		return 0, errInvalidQueryParam
	}
	return n, nil
}

// pageSize is the most entities one response holds.
const pageSize = 1000

func (f *Frontend) queryTables(rq *request, q url.Values) *apiError {
	expr, err := odata.Parse(q.Get("$filter"))
	if err != nil {
		return errBadQuery.because(err)
	}
	top, e := parseTop(q)
	if e != nil {
		return e
	}
	if top == 0 {
		top = pageSize
	}
	var start []byte
	if n := q.Get("NextTableName"); n != "" {
		start = tablecodec.TableKey(n)
	}
	ctx := rq.r.Context()
	var names []string
	var next string
	pos := start
scan:
	for {
		kss, more, err := f.eng.ListKeyspaces(ctx, tablecodec.TablesKeyspace, pos, pageSize)
		if err != nil {
			return engineError(err)
		}
		for _, ks := range kss {
			name := string(ks)
			probe := &tablecodec.Entity{Props: []tablecodec.Property{{Name: "TableName", Type: tablecodec.EdmString, Value: name}}}
			if !expr.Eval(probe) {
				continue
			}
			if len(names) == top {
				next = name
				break scan
			}
			names = append(names, name)
		}
		if more == nil {
			break
		}
		pos = more
	}
	if next != "" {
		rq.w.Header().Set("X-Ms-Continuation-Nexttablename", next)
	}
	out := []byte{'{'}
	if rq.level != tablecodec.NoMetadata {
		out = appendMember(out, "odata.metadata", rq.baseURL()+"$metadata#Tables")
		out = append(out, ',')
	}
	out = append(out, `"value":[`...)
	for i, n := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = rq.tableJSON(out, n, false)
	}
	rq.reply(http.StatusOK, append(out, "]}"...))
	return nil
}

// keyspaceOf resolves a table for a read, without locks (the latest
// committed table list).
func (f *Frontend) keyspaceOf(rq *request, name string) (adapters.Keyspace, *apiError) {
	ks, ok, err := f.eng.LookupKeyspace(rq.r.Context(), tablecodec.TablesKeyspace, tablecodec.TableKey(name))
	if err != nil {
		return "", engineError(err)
	}
	if !ok {
		return "", errTableNotFound
	}
	return ks, nil
}

// lockTable resolves a table inside a write transaction, S-locking its
// entry so a concurrent delete cannot interleave.
func (f *Frontend) lockTable(rq *request, t *txn.Txn, name string) (adapters.Keyspace, error) {
	ks, ok, err := t.LookupKeyspace(rq.r.Context(), tablecodec.TablesKeyspace, tablecodec.TableKey(name))
	if err != nil {
		return "", err
	}
	if !ok {
		return "", errTableNotFound
	}
	return ks, nil
}

const emptyACL = `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers />`

// tableACL answers Get/Set Table ACL: nemo keeps no stored access
// policies, so it reports none, accepts a Set that sets none, and refuses
// one that sets any (dropping it would answer the next Get wrongly).
func (f *Frontend) tableACL(rq *request, table string, q url.Values) *apiError {
	if q.Get("comp") != "acl" {
		return errInvalidQueryParam
	}
	if _, e := f.keyspaceOf(rq, table); e != nil {
		return e
	}
	switch rq.r.Method {
	case http.MethodGet:
		rq.w.Header().Set("Content-Type", "application/xml")
		rq.w.WriteHeader(http.StatusOK)
		_, _ = rq.w.Write([]byte(emptyACL))
		return nil
	case http.MethodPut:
		b, e := rq.body()
		if e != nil {
			return e
		}
		var acl struct {
			IDs []struct{} `xml:"SignedIdentifier"`
		}
		if e := decodeSettings(b, &acl); e != nil {
			return e
		}
		if len(acl.IDs) > 0 {
			return errNoPolicies
		}
		rq.w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errVerb
}

// decodeSettings decodes an XML settings document (an ACL, service
// properties); an empty body sets nothing.
func decodeSettings(b []byte, v any) *apiError {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := xml.Unmarshal(b, v); err != nil {
		return errInvalidXML.because(err)
	}
	return nil
}

// serviceSettings is what Set Table Service Properties can turn on.
type serviceSettings struct {
	Logging struct {
		Delete, Read, Write bool
	}
	HourMetrics, MinuteMetrics struct {
		Enabled bool
	}
	Cors struct {
		Rules []struct{} `xml:"CorsRule"`
	}
}

func (s serviceSettings) turnsOn() bool {
	l := s.Logging
	return l.Delete || l.Read || l.Write || s.HourMetrics.Enabled || s.MinuteMetrics.Enabled || len(s.Cors.Rules) > 0
}

const serviceProperties = `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read><Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors /></StorageServiceProperties>`

// serviceProperties answers Get/Set Table Service Properties and Get
// Table Service Stats with fixed documents: nemo has no analytics logging,
// metrics or CORS rules, so a Set that turns any on is refused rather
// than dropped.
func (f *Frontend) serviceProperties(rq *request, q url.Values) *apiError {
	if q.Get("restype") != "service" {
		return errInvalidURI.because(errors.New("service request without restype=service"))
	}
	var doc string
	switch {
	case q.Get("comp") == "properties" && rq.r.Method == http.MethodGet:
		doc = serviceProperties
	case q.Get("comp") == "properties" && rq.r.Method == http.MethodPut:
		b, e := rq.body()
		if e != nil {
			return e
		}
		var set serviceSettings
		if e := decodeSettings(b, &set); e != nil {
			return e
		}
		if set.turnsOn() {
			return errNoServiceSettings
		}
		rq.w.WriteHeader(http.StatusAccepted)
		return nil
	case q.Get("comp") == "stats" && rq.r.Method == http.MethodGet:
		doc = `<?xml version="1.0" encoding="utf-8"?><StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>` +
			rq.w.Header().Get("Date") + `</LastSyncTime></GeoReplication></StorageServiceStats>`
	default:
		return errInvalidQueryParam
	}
	rq.w.Header().Set("Content-Type", "application/xml")
	rq.w.WriteHeader(http.StatusOK)
	_, _ = rq.w.Write([]byte(doc))
	return nil
}
