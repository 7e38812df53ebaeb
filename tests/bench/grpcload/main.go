// Command grpcload calls one unary gRPC method at a fixed rate (open loop) over plaintext HTTP/2
// and prints how many calls were answered OK, their latency percentiles and the status codes of
// the rest, as JSON.
//
// With -stream it drives a bidirectional streaming method instead, as agents holding one
// long-lived stream each do: one stream per sender (message), spread round-robin over the
// connections, each sending its sender's message on the same schedule as the unary calls would
// (so every sender once per len(messages)/rate seconds) and expecting exactly one reply per
// message, in order; the latency of a message is from its send to its reply. A stream that fails
// counts every message still unanswered on it under the status it ended with and is reopened on
// its sender's next turn.
//
// Written here rather than using ghz because a load generator that shares a 2-core machine with
// the server under test must be cheap: ghz builds every request from a JSON template through
// reflection and costs the machine several hundred microseconds of CPU per call, as much as the
// server it measures. This one sends pre-serialised messages through grpc-go with a codec that
// passes bytes through, appending to each only the two fields that change from call to call.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawCodec sends and receives messages as the bytes they already are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

type result struct {
	OK         int            `json:"ok"`
	Sent       int            `json:"sent"`
	Late       int            `json:"late"`
	Seconds    float64        `json:"seconds"`
	Codes      map[string]int `json:"codes"`
	P50Ms      float64        `json:"p50_ms"`
	P90Ms      float64        `json:"p90_ms"`
	P99Ms      float64        `json:"p99_ms"`
	MaxMs      float64        `json:"max_ms"`
	Unfinished int            `json:"unfinished"`
}

// readMessages reads the file of messages: each a 4-byte little-endian length, then the bytes.
func readMessages(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, fmt.Errorf("%s: truncated length", path)
		}
		n := int(binary.LittleEndian.Uint32(raw))
		if len(raw) < 4+n {
			return nil, fmt.Errorf("%s: truncated message", path)
		}
		out = append(out, raw[4:4+n])
		raw = raw[4+n:]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	return out, nil
}

// message builds one request: the message of a node, then (appended protobuf fields, which a
// parser takes as set) field 2 = sequence as a varint and field 3 = timestamp as a double.
func message(base []byte, sequence uint64, timestamp float64) []byte {
	body := make([]byte, 0, len(base)+20)
	body = append(body, base...)
	body = append(body, 0x10)
	body = binary.AppendUvarint(body, sequence)
	body = append(body, 0x19)
	body = binary.LittleEndian.AppendUint64(body, math.Float64bits(timestamp))
	return body
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return -1 // JSON has no NaN
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return float64(sorted[i]) / 1e6
}

// sendTurn is one scheduled message of a sender in stream mode.
type sendTurn struct {
	sequence uint64
	due      time.Time
}

// inFlight is a streamed message waiting for its reply.
type inFlight struct {
	began, due time.Time
}

var streamDesc = grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// senderStream is one sender's stream: open, and reopened on its next turn after it failed.
type senderStream struct {
	conn    *grpc.ClientConn
	method  string
	base    []byte
	stream  grpc.ClientStream
	cancel  context.CancelFunc
	pending chan inFlight
}

// openStream opens a sender's stream and makes one exchange on it (sequence 0), waiting for the
// reply, so that the server has the stream before any measured message.
func openStream(conn *grpc.ClientConn, method string, base []byte) (*senderStream, error) {
	s := &senderStream{conn: conn, method: method, base: base}
	if err := s.open(); err != nil {
		return s, err
	}
	body := message(base, 0, float64(time.Now().UnixNano())/1e9)
	var reply []byte
	if err := s.stream.SendMsg(&body); err != nil {
		return s, err
	}
	return s, s.stream.RecvMsg(&reply)
}

func (s *senderStream) open() error {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := s.conn.NewStream(ctx, &streamDesc, s.method)
	if err != nil {
		cancel()
		return err
	}
	s.stream, s.cancel = stream, cancel
	return nil
}

// send sends the sender's messages as their turns come; a goroutine per stream (receive) reads
// the replies and times each against the send it answers (replies come in order, one each).
func (s *senderStream) send(turns <-chan sendTurn, wg *sync.WaitGroup,
	outstanding *atomic.Int64, record func(began, due time.Time, took time.Duration, code string)) {
	finish := func(f inFlight, took time.Duration, code string) {
		record(f.began, f.due, took, code)
		outstanding.Add(-1)
		wg.Done()
	}
	for turn := range turns {
		if s.pending == nil {
			if s.stream == nil {
				if err := s.open(); err != nil {
					finish(inFlight{began: time.Now(), due: turn.due}, 0, status.Code(err).String())
					continue
				}
			}
			s.pending = make(chan inFlight, 1024)
			go receive(s.stream, s.pending, finish)
		}
		body := message(s.base, turn.sequence, float64(time.Now().UnixNano())/1e9)
		began := time.Now()
		if err := s.stream.SendMsg(&body); err != nil {
			// The stream is broken: the receiver reports its status for what is pending; this
			// message never went out. Reopen on the next turn.
			close(s.pending)
			finish(inFlight{began: began, due: turn.due}, 0, "Unavailable")
			s.cancel()
			s.stream, s.pending = nil, nil
			continue
		}
		s.pending <- inFlight{began: began, due: turn.due}
	}
}

// receive reads the replies of one stream until it ends.
func receive(stream grpc.ClientStream, pending <-chan inFlight,
	finish func(f inFlight, took time.Duration, code string)) {
	var reply []byte
	for f := range pending {
		if err := stream.RecvMsg(&reply); err != nil {
			code := status.Code(err).String()
			if err == io.EOF {
				code = "Unavailable" // the server ended the stream with a message unanswered
			}
			finish(f, 0, code)
			for rest := range pending {
				finish(rest, 0, code)
			}
			return
		}
		finish(f, time.Since(f.began), "OK")
	}
}

func main() {
	addr := flag.String("addr", "", "server HOST:PORT")
	method := flag.String("method", "/carico.v1.Aggregator/Exchange", "gRPC method path")
	data := flag.String("data", "", "file of length-prefixed messages, one per sender")
	rate := flag.Float64("rate", 1000, "calls per second (sent on schedule, whatever the answers)")
	conns := flag.Int("connections", 32, "connections, calls spread round-robin")
	duration := flag.Duration("duration", 4*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time first")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of a call")
	streamMode := flag.Bool("stream", false, "method is stream-stream: one stream per sender")
	flag.Parse()
	messages, err := readMessages(*data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	clients := make([]*grpc.ClientConn, *conns)
	for i := range clients {
		// A client of its own: one connection each, as separate agents would have.
		c, err := grpc.NewClient("passthrough:///"+*addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		clients[i] = c
	}
	// Connected before the schedule starts: set-up is not what is measured.
	ready, cancelReady := context.WithTimeout(context.Background(), *timeout)
	for _, c := range clients {
		c.Connect()
		for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
			if !c.WaitForStateChange(ready, s) {
				fmt.Fprintln(os.Stderr, "cannot connect to", *addr)
				os.Exit(1)
			}
		}
	}
	cancelReady()

	// Stream mode: every sender's stream is open, and has carried one (unmeasured) exchange, before
	// the schedule starts, as agents hold theirs: opening 5,000 streams is set-up, not load.
	var streams []*senderStream
	if *streamMode {
		streams = make([]*senderStream, len(messages))
		var primed sync.WaitGroup
		var failed atomic.Int64
		var firstErr atomic.Value
		// A bounded number of openings at a time: a gRPC server cancels calls beyond the ones it
		// holds waiting for its application (grpc-core's pending-request limit), and a burst of
		// thousands of new streams on a busy server would overflow that.
		opening := make(chan struct{}, 128)
		for node := range streams {
			primed.Add(1)
			go func(node int) {
				defer primed.Done()
				opening <- struct{}{}
				defer func() { <-opening }()
				s, err := openStream(clients[node%len(clients)], *method, messages[node])
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				streams[node] = s
			}(node)
		}
		primed.Wait()
		if n := failed.Load(); n > 0 {
			fmt.Fprintf(os.Stderr, "%d streams could not be opened: %v\n", n, firstErr.Load())
			os.Exit(1)
		}
	}

	var mu sync.Mutex
	var latencies []time.Duration
	codes := map[string]int{}
	var late, sent int
	var outstanding atomic.Int64
	var wg sync.WaitGroup

	start := time.Now().Add(50 * time.Millisecond)
	measureFrom := start.Add(*warmup)
	end := measureFrom.Add(*duration)
	interval := time.Duration(float64(time.Second) / *rate)
	total := int(float64(*warmup+*duration) / float64(interval))

	// record counts one call (or streamed message) that began at began, due at due.
	record := func(began, due time.Time, took time.Duration, code string) {
		if began.Before(measureFrom) || !began.Before(end) {
			return
		}
		mu.Lock()
		sent++
		if code == "OK" {
			latencies = append(latencies, took)
		} else {
			codes[code]++
		}
		if began.Sub(due) > 100*time.Millisecond {
			late++
		}
		mu.Unlock()
	}

	call := func(i int, due time.Time) {
		defer wg.Done()
		defer outstanding.Add(-1)
		node := i % len(messages)
		body := message(messages[node], uint64(i/len(messages)+1), float64(time.Now().UnixNano())/1e9)
		var reply []byte
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		began := time.Now()
		err := clients[i%len(clients)].Invoke(ctx, *method, &body, &reply)
		cancel()
		code := "OK"
		if err != nil {
			code = status.Code(err).String()
		}
		record(began, due, time.Since(began), code)
	}

	// Stream mode: each sender's turns go to its own goroutine, which keeps one stream open.
	var senders []chan sendTurn
	if *streamMode {
		senders = make([]chan sendTurn, len(messages))
		for node := range senders {
			// Buffered: the schedule never waits for a sender (a slow one falls behind: "late").
			senders[node] = make(chan sendTurn, 64)
			go streams[node].send(senders[node], &wg, &outstanding, record)
		}
	}

	// Tell the caller on stderr when the measured window opens and closes (it measures the
	// server's CPU time over the same window).
	go func() {
		time.Sleep(time.Until(measureFrom))
		fmt.Fprintln(os.Stderr, "measure")
	}()

	// Walk the schedule, waking about every millisecond and starting whatever is due.
	for i := 0; i < total; {
		now := time.Now()
		for i < total {
			due := start.Add(time.Duration(i) * interval)
			if due.After(now) {
				break
			}
			wg.Add(1)
			outstanding.Add(1)
			if senders != nil {
				senders[i%len(messages)] <- sendTurn{sequence: uint64(i/len(messages) + 1), due: due}
			} else {
				go call(i, due)
			}
			i++
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Until(end))
	fmt.Fprintln(os.Stderr, "end")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(*timeout + 5*time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	out := result{
		OK:         len(latencies),
		Sent:       sent,
		Late:       late,
		Seconds:    duration.Seconds(),
		Codes:      codes,
		P50Ms:      percentile(latencies, 50),
		P90Ms:      percentile(latencies, 90),
		P99Ms:      percentile(latencies, 99),
		MaxMs:      percentile(latencies, 100),
		Unfinished: int(outstanding.Load()),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
