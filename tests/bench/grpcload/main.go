// Command grpcload calls one unary gRPC method at a fixed rate (open loop) over plaintext HTTP/2
// and prints how many calls were answered OK, their latency percentiles and the status codes of
// the rest, as JSON.
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

func main() {
	addr := flag.String("addr", "", "server HOST:PORT")
	method := flag.String("method", "/carico.v1.Aggregator/Exchange", "gRPC method path")
	data := flag.String("data", "", "file of length-prefixed messages, one per sender")
	rate := flag.Float64("rate", 1000, "calls per second (sent on schedule, whatever the answers)")
	conns := flag.Int("connections", 32, "connections, calls spread round-robin")
	duration := flag.Duration("duration", 4*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time first")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of a call")
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
		took := time.Since(began)
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
			go call(i, due)
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
