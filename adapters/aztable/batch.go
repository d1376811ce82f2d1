package aztable

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
)

// The answer to a $batch (an entity group transaction) is a multipart
// body holding one change set, whose parts are HTTP responses:
//
//	--batchresponse_B
//	Content-Type: multipart/mixed; boundary=changesetresponse_C
//
//	--changesetresponse_C
//	Content-Type: application/http
//	Content-Transfer-Encoding: binary
//
//	HTTP/1.1 204 No Content
//	ETag: W/"datetime'2026-12-02T08%3A09%3A46.5113421Z'"
//	...
//	--changesetresponse_C--
//	--batchresponse_B--
//
// When every operation succeeded there is one response per operation, in
// request order, an insert's or update's carrying the entity's new ETag.
// When one failed, the transaction was not applied and the change set holds
// that operation's response alone: its status and an odata.error whose
// message begins with the operation's zero-based index and a colon
// ("1:The specified entity already exists.\nRequestId:..."). Azurite
// answers the same way and also sets Content-ID to the index plus one,
// even though the SDK sends no Content-ID; Azure echoes a Content-ID only
// when the request carried one, so only the message prefix is used.

// subResponse is one operation's response inside a $batch answer.
type subResponse struct {
	status  int
	header  http.Header
	code    string // odata.error code, when the operation failed
	message string // odata.error message
}

// subFailure is the failed operation of a refused transaction.
type subFailure struct {
	index  int // the operation's position in the transaction; -1 if unknown
	status int
	code   string
}

// batchFailure returns the failed operation named by a refused
// transaction's answer, or nil if the answer names none.
func batchFailure(resp *http.Response) *subFailure {
	subs, err := batchResponses(resp)
	if err != nil {
		return nil
	}
	for _, sr := range subs {
		if sr.status >= 400 {
			return &subFailure{index: failedIndex(sr.message), status: sr.status, code: sr.code}
		}
	}
	return nil
}

// failedIndex parses the operation index that prefixes a failed
// transaction's error message ("2:..."); -1 if there is none.
func failedIndex(msg string) int {
	i := strings.IndexByte(msg, ':')
	if i <= 0 {
		return -1
	}
	n, err := strconv.Atoi(msg[:i])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// batchResponses parses the operation responses of a $batch answer, in
// order.
func batchResponses(resp *http.Response) ([]subResponse, error) {
	body, err := payload(resp)
	if err != nil {
		return nil, err
	}
	boundary := ""
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		boundary = params["boundary"]
	}
	if boundary == "" {
		boundary = firstBoundary(body)
	}
	if boundary == "" {
		return nil, errors.New("batch answer without a multipart boundary")
	}
	var out []subResponse
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("batch answer: %w", err)
		}
		data, err := io.ReadAll(part)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) { // Cosmos ends the change set early
			return nil, fmt.Errorf("batch answer: %w", err)
		}
		mt, params, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		if !strings.HasPrefix(mt, "multipart/") {
			sr, err := readSubResponse(data)
			if err != nil {
				return nil, err
			}
			out = append(out, sr)
			continue
		}
		inner := params["boundary"]
		if inner == "" {
			inner = firstBoundary(data)
		}
		ir := multipart.NewReader(bytes.NewReader(data), inner)
		for {
			p, err := ir.NextPart()
			if err == io.EOF || (err != nil && errors.Is(err, io.ErrUnexpectedEOF)) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("batch change set: %w", err)
			}
			d, err := io.ReadAll(p)
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("batch change set: %w", err)
			}
			sr, err := readSubResponse(d)
			if err != nil {
				return nil, err
			}
			out = append(out, sr)
		}
	}
}

// firstBoundary reads a boundary from a body's first line ("--boundary").
func firstBoundary(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimRight(line, "\r")
	if !bytes.HasPrefix(line, []byte("--")) {
		return ""
	}
	return string(line[2:])
}

// readSubResponse parses one operation's HTTP response.
func readSubResponse(data []byte) (subResponse, error) {
	r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
	if err != nil {
		return subResponse{}, fmt.Errorf("batch operation response: %w", err)
	}
	defer r.Body.Close()
	sr := subResponse{status: r.StatusCode, header: r.Header}
	if r.StatusCode >= 400 {
		b, _ := io.ReadAll(r.Body)
		var e struct {
			Err struct {
				Code    string `json:"code"`
				Message struct {
					Value string `json:"value"`
				} `json:"message"`
			} `json:"odata.error"`
		}
		if json.Unmarshal(bytes.TrimSpace(b), &e) == nil {
			sr.code, sr.message = e.Err.Code, e.Err.Message.Value
		}
		if sr.code == "" {
			sr.code = r.Header.Get("x-ms-error-code")
		}
	}
	return sr, nil
}
