package chaos

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards loopback TCP connections to a gRPC server and, at a set
// rate, loses a reply after the server sent it: it forwards the request,
// swallows the first frame of the server's answer to it and closes both
// sides. The caller sees UNAVAILABLE for a call the server completed — the
// fault a client meets when a load balancer or a network drops a connection
// after the work was done.
//
// It reads HTTP/2 frame headers (9 bytes: length, type, flags, stream) and
// nothing else; the bytes it forwards are the bytes it read.
type Proxy struct {
	ln     net.Listener
	target string
	rate   atomic.Uint64 // drop probability × 1e6
	drops  atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// HTTP/2 as the proxy needs it (RFC 9113 §3.4, §4.1, §6.2).
const (
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	frameHeader   = 9
	frameHeaders  = 0x1
	frameData     = 0x0
)

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDropRate sets the probability (0 to 1) that a call's reply is lost.
func (p *Proxy) SetDropRate(f float64) { p.rate.Store(uint64(f * 1e6)) }

// Dropped counts replies lost so far.
func (p *Proxy) Dropped() int64 { return p.drops.Load() }

// Close stops accepting, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// conn is one proxied connection: the streams whose replies it will lose.
type conn struct {
	mu     sync.Mutex
	doomed map[uint32]bool
}

func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	c := &conn{doomed: map[uint32]bool{}}
	done := make(chan struct{}, 2)
	go func() { p.upstream(c, client, server); done <- struct{}{} }()
	go func() { p.downstream(c, server, client); done <- struct{}{} }()
	<-done // either side ending (or a swallowed reply) ends both
	client.Close()
	server.Close()
	<-done
}

// upstream forwards the client's frames and dooms a new stream's reply at
// the drop rate, before its request reaches the server.
func (p *Proxy) upstream(c *conn, from, to net.Conn) {
	pre := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(from, pre); err != nil {
		return
	}
	if _, err := to.Write(pre); err != nil {
		return
	}
	for {
		f, err := readFrame(from)
		if err != nil {
			return
		}
		if f.kind == frameHeaders && f.stream != 0 {
			if r := p.rate.Load(); r > 0 && rand.Uint64N(1e6) < r {
				c.mu.Lock()
				c.doomed[f.stream] = true
				c.mu.Unlock()
			}
		}
		if _, err := to.Write(f.raw); err != nil {
			return
		}
	}
}

// downstream forwards the server's frames until the first frame of a doomed
// stream's reply, which it swallows.
func (p *Proxy) downstream(c *conn, from, to net.Conn) {
	for {
		f, err := readFrame(from)
		if err != nil {
			return
		}
		if f.kind == frameHeaders || f.kind == frameData {
			c.mu.Lock()
			doomed := c.doomed[f.stream]
			c.mu.Unlock()
			if doomed {
				p.drops.Add(1)
				return
			}
		}
		if _, err := to.Write(f.raw); err != nil {
			return
		}
	}
}

type frame struct {
	kind   byte
	stream uint32
	raw    []byte // header and payload, as read
}

var errFrameTooLarge = errors.New("frame larger than 16 MiB")

func readFrame(r io.Reader) (frame, error) {
	h := make([]byte, frameHeader)
	if _, err := io.ReadFull(r, h); err != nil {
		return frame{}, err
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if n > 1<<24 {
		return frame{}, errFrameTooLarge
	}
	raw := make([]byte, frameHeader+n)
	copy(raw, h)
	if _, err := io.ReadFull(r, raw[frameHeader:]); err != nil {
		return frame{}, err
	}
	return frame{kind: h[3], stream: binary.BigEndian.Uint32(h[5:9]) & 0x7fffffff, raw: raw}, nil
}
