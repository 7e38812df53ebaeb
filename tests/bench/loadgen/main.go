// Command loadgen sends kube-scheduler-shaped extender pairs — a filter, then a prioritize of the
// nodes that passed — from concurrent virtual clients, one keep-alive connection each, and prints
// pair throughput and latency as JSON.
//
// Written here rather than taken from wrk/hey/oha because those measure single requests: what the
// extender benchmark needs is the latency of the *pair* that one scheduling cycle costs, and a
// client cheap enough in CPU not to compete with the server on a small machine. Standard library
// only, so it builds offline from the local Go toolchain.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Pairs      int     `json:"pairs"`
	PairsPerS  float64 `json:"pairs_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	PairsTotal int     `json:"pairs_total"`
}

func post(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	// Read the whole reply: the server's encoding and sending are part of the cost measured.
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return nil
}

func main() {
	base := flag.String("url", "", "extender prefix URL, e.g. http://127.0.0.1:8888/scheduler")
	filterFile := flag.String("filter-body", "", "file holding the filter request body")
	prioFile := flag.String("prioritize-body", "", "file holding the prioritize request body")
	workers := flag.Int("workers", 8, "concurrent virtual clients")
	duration := flag.Duration("duration", 2500*time.Millisecond, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time first")
	flag.Parse()
	filterBody, err := os.ReadFile(*filterFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	prioBody, err := os.ReadFile(*prioFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	filterURL, prioURL := *base+"/filter", *base+"/prioritize"

	start := time.Now()
	measureFrom := start.Add(*warmup)
	stopAt := measureFrom.Add(*duration)
	lat := make([][]time.Duration, *workers)
	total := make([]int, *workers)
	errs := make(chan error, *workers)
	var measured atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// One connection per virtual client, as one scheduler keeps one per extender.
			client := &http.Client{
				Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true},
				Timeout:   60 * time.Second,
			}
			for {
				t0 := time.Now()
				// Past the end, stop — unless no pair has been measured yet (pairs slower than
				// the whole run): then this one is measured, so every case gives a figure.
				if !t0.Before(stopAt) && measured.Load() > 0 {
					return
				}
				if err := post(client, filterURL, filterBody); err != nil {
					errs <- err
					return
				}
				if err := post(client, prioURL, prioBody); err != nil {
					errs <- err
					return
				}
				total[w]++
				if !t0.Before(measureFrom) {
					lat[w] = append(lat[w], time.Since(t0))
					measured.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	select {
	case err := <-errs:
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	default:
	}
	elapsed := time.Since(measureFrom).Seconds()
	var all []time.Duration
	sum := 0
	for w := range lat {
		all = append(all, lat[w]...)
		sum += total[w]
	}
	if len(all) == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: no pair completed in the measured time")
		os.Exit(1)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	p99 := len(all) * 99 / 100
	if p99 >= len(all) {
		p99 = len(all) - 1
	}
	out, _ := json.Marshal(result{
		Pairs:      len(all),
		PairsPerS:  float64(len(all)) / elapsed,
		P50Ms:      ms(all[len(all)/2]),
		P99Ms:      ms(all[p99]),
		PairsTotal: sum,
	})
	fmt.Println(string(out))
}
