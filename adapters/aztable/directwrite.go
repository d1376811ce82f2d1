package aztable

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/nemocache/nemo/adapters"
)

// Writes outside the SDK. The service stores entities whose PartitionKey
// is empty, but aztables v1.4.1 refuses to send a replace, an upsert or
// a delete of one, alone or inside a transaction ("parameter partitionKey
// cannot be empty"): its generated client checks the key before it builds
// the URL. An adapter error there would leave such a write unwritable
// forever (a write-back retrying an unavailable store, an acknowledged
// write never reaching Azure). So operations go out as requests of nemo's
// own through the directClient that serves point reads: the same
// signature, transport, retries and unsureNote marking, the same headers
// as the SDK's request, and a refusal as the *azcore.ResponseError the
// SDK returns, so writeOne and submit treat both paths alike. With an
// account key or a SAS every partition's writes take this path: a
// forwarded write then cost nemo a tenth to a quarter less CPU than
// through the SDK's pipeline (docs/benchmarks.md, "Forwarded requests
// against a bare proxy"). A Store authenticated with a token credential sends only the
// partition "" so, with a bearer token (tokenTransport); one opened with a
// SAS connection string carries the signature in their URLs (sasTransport).

// sendsDirect reports whether the point reads and writes of partition pk
// go out as direct requests: every partition's with an account key or a
// SAS (allPartitions), else the partition "" alone.
func (s *Store) sendsDirect(pk string) bool {
	return s.direct != nil && (pk == "" || s.direct.allPartitions)
}

// opRequest is o on table as one request: its method, URL and the headers
// particular to it.
func (d *directClient) opRequest(table string, o op) (method, target string, hdr http.Header) {
	hdr = http.Header{}
	if o.body != nil {
		hdr["Content-Type"] = []string{"application/json"}
	}
	if o.expect.Kind == adapters.ExpectVersion {
		hdr["If-Match"] = []string{string(o.expect.Version)}
	}
	switch {
	case o.body == nil:
		if o.expect.Kind != adapters.ExpectVersion {
			hdr["If-Match"] = []string{"*"}
		}
		return http.MethodDelete, d.entityURL(table, o.pk, o.rk), hdr
	case o.expect.Kind == adapters.ExpectAbsent:
		hdr["Prefer"] = []string{"return-no-content"}
		return http.MethodPost, d.endpoint + "/" + url.PathEscape(table), hdr
	}
	return http.MethodPut, d.entityURL(table, o.pk, o.rk), hdr // replace, with If-Match or without
}

// write sends o by itself and returns the entity's new ETag ("" for a
// delete).
func (d *directClient) write(ctx context.Context, table string, o op) (adapters.Version, error) {
	method, target, hdr := d.opRequest(table, o)
	resp, _, err := d.send(ctx, method, target, hdr, o.body, http.StatusOK, http.StatusCreated, http.StatusNoContent)
	if err != nil {
		return "", err
	}
	return adapters.Version(resp.Header.Get("ETag")), nil
}

// transaction sends ops as one entity group transaction ($batch: one
// change set holding one HTTP request per operation, each as opRequest
// builds it) and returns the answer, its body readable again. A refused
// transaction (202 whose change set holds a failed operation) is the
// *azcore.ResponseError the SDK returns for it; an answer that cannot be
// read is adapters.ErrUnknownOutcome.
func (d *directClient) transaction(ctx context.Context, table string, ops []op) (*http.Response, error) {
	batch, changes := "batch_"+boundaryID(), "changeset_"+boundaryID()
	var b bytes.Buffer
	fmt.Fprintf(&b, "--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n", batch, changes)
	for _, o := range ops {
		method, target, hdr := d.opRequest(table, o)
		if d.opQuery != "" {
			target += "?" + d.opQuery
		}
		fmt.Fprintf(&b, "--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n%s %s HTTP/1.1\r\n", changes, method, target)
		hdr["Accept"] = []string{"application/json;odata=minimalmetadata"}
		hdr["Dataserviceversion"] = []string{"3.0"}
		for _, k := range slices.Sorted(maps.Keys(hdr)) {
			fmt.Fprintf(&b, "%s: %s\r\n", k, hdr.Get(k))
		}
		b.WriteString("\r\n")
		b.Write(o.body)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n--%s--\r\n", changes, batch)
	hdr := http.Header{"Content-Type": {"multipart/mixed; boundary=" + batch}}
	resp, body, err := d.send(ctx, http.MethodPost, d.endpoint+"/$batch", hdr, b.Bytes(), http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	subs, err := batchResponses(resp) // caches the body: readable again
	if err != nil {
		// Applied or refused, the answer does not say which.
		return nil, fmt.Errorf("aztable: batch: %w: %w", adapters.ErrUnknownOutcome, err)
	}
	for _, sr := range subs {
		if sr.status >= 400 {
			return nil, runtime.NewResponseError(resp)
		}
	}
	return resp, nil
}

// boundaryID is a random multipart boundary suffix.
func boundaryID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
