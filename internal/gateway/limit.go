package gateway

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
)

// tooLarge is the refusal of a body past limit bytes.
func tooLarge(what string, limit int64) *refusal {
	return refuse(http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonRequestTooLarge, "",
		"%s is larger than %d bytes (twice --max-request-bytes, for JSON's base64); send a smaller request", what, limit)
}

// asConnect is how vanguard must see a refusal met while it reads: as a
// *connect.Error, whose code and details it keeps (any other error it
// answers INTERNAL).
func asConnect(r *refusal) error { return r.connectError() }

// boundedGzip is the transcoder's gzip decompressor, held to limit decoded
// bytes: it reads the stream a buffer at a time and stops one byte past
// the limit, so a bomb costs limit bytes, not what it expands to. A body
// that is not gzip is the caller's error (INVALID_ARGUMENT), not the
// server's.
type boundedGzip struct {
	zr    gzip.Reader
	limit int64
	n     int64
	err   error // sticky: a Reset that failed
}

func newBoundedGzip(limit int64) func() connect.Decompressor {
	return func() connect.Decompressor { return &boundedGzip{limit: limit} }
}

func (d *boundedGzip) Reset(r io.Reader) error {
	d.n, d.err = 0, nil
	if err := d.zr.Reset(r); err != nil {
		d.err = notGzip(err)
		return d.err
	}
	return nil
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if room := d.limit - d.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := d.zr.Read(p)
	d.n += int64(n)
	switch {
	case d.n > d.limit:
		d.err = asConnect(tooLarge("the gzip-decoded request body", d.limit))
		return n, d.err
	case err != nil && !errors.Is(err, io.EOF):
		d.err = notGzip(err)
		return n, d.err
	}
	return n, err
}

func (d *boundedGzip) Close() error { return d.zr.Close() }

func notGzip(err error) error {
	return asConnect(refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, "Content-Encoding",
		"the request body is not valid gzip, as its Content-Encoding (or grpc-encoding) says: %v", err))
}

// limitedBody is a request body held to limit bytes as sent: past it, Read
// fails with the REQUEST_TOO_LARGE refusal (vanguard's own buffer limit,
// set one byte higher, would answer it without a reason).
type limitedBody struct {
	io.ReadCloser
	limit, n int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if room := b.limit - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		return n, asConnect(tooLarge("the request body", b.limit))
	}
	return n, err
}
