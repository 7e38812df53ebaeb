// Command workload is the one static program of the real node's test images.
//
//	workload pause                       the pod sandbox: sleeps until SIGTERM/SIGINT, reaps orphans
//	workload bpi -threads N -digits D    CPU-bound job: N threads each compute D digits of pi
//	                                     (-rounds R times), then it prints the time and exits
//	workload mem -mib M [-seconds S]     memory-bound: keeps M MiB resident (pages re-touched
//	                                     slowly, little CPU) for S seconds (0: until stopped)
//	workload idle [-port P]              an idle server: answers GET / with "ok" until stopped
//
// bpi allocates nothing while it computes (a spigot over one preallocated array), and GOMAXPROCS
// is set to N, so the process has N runnable threads and no garbage collector competing with
// them: the CPU demand the test expects is exactly N cores.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: workload pause|bpi|mem|idle [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "pause":
		pause()
	case "bpi":
		bpi(args)
	case "mem":
		mem(args)
	case "idle":
		idle(args)
	default:
		fmt.Fprintf(os.Stderr, "workload: unknown command %q\n", cmd)
		os.Exit(2)
	}
}

func stopSignals() chan os.Signal {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	return stop
}

// pause is PID 1 of the pod sandbox: it holds the namespaces and reaps zombies.
func pause() {
	stop := stopSignals()
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}

// piDigits computes n decimal digits of pi with the Rabinowitz-Wagon spigot into out and returns
// the sum of the digits (a check that the work was done). a is scratch of length 10*n/3+1.
func piDigits(n int, a []int32, out []byte) int {
	for i := range a {
		a[i] = 2
	}
	nines, predigit, written, sum := 0, 0, 0, 0
	emit := func(d int) {
		if written < len(out) {
			out[written] = byte('0' + d)
			written++
			sum += d
		}
	}
	for j := 0; j < n; j++ {
		q := 0
		for i := len(a) - 1; i > 0; i-- {
			x := 10*int(a[i]) + q*(i+1)
			a[i] = int32(x % (2*i + 1))
			q = x / (2*i + 1)
		}
		x := 10*int(a[0]) + q
		a[0] = int32(x % 10)
		q = x / 10
		switch {
		case q == 9:
			nines++
		case q == 10:
			emit(predigit + 1)
			for ; nines > 0; nines-- {
				emit(0)
			}
			predigit = 0
		default:
			if j > 0 {
				emit(predigit)
			}
			predigit = q
			for ; nines > 0; nines-- {
				emit(9)
			}
		}
	}
	emit(predigit)
	return sum
}

func bpi(args []string) {
	fs := flag.NewFlagSet("bpi", flag.ExitOnError)
	threads := fs.Int("threads", 1, "threads computing at once")
	digits := fs.Int("digits", 3000, "digits of pi per round")
	rounds := fs.Int("rounds", 1, "rounds per thread")
	_ = fs.Parse(args)
	if *threads < 1 || *digits < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bpi: -threads, -digits and -rounds must be positive")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*threads)
	start := time.Now()
	var wg sync.WaitGroup
	sums := make([]int, *threads)
	for t := 0; t < *threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			a := make([]int32, 10**digits/3+1)
			out := make([]byte, *digits)
			for r := 0; r < *rounds; r++ {
				sums[t] = piDigits(*digits, a, out)
			}
			if t == 0 {
				fmt.Printf("pi %s...\n", out[:min(len(out), 20)])
			}
		}(t)
	}
	wg.Wait()
	fmt.Printf("bpi threads=%d digits=%d rounds=%d digit-sum=%d seconds=%.3f\n",
		*threads, *digits, *rounds, sums[0], time.Since(start).Seconds())
}

func mem(args []string) {
	fs := flag.NewFlagSet("mem", flag.ExitOnError)
	mib := fs.Int("mib", 256, "MiB to keep resident")
	seconds := fs.Float64("seconds", 0, "seconds to run (0: until stopped)")
	_ = fs.Parse(args)
	runtime.GOMAXPROCS(1)
	const page = 4096
	buf := make([]byte, *mib<<20)
	for i := 0; i < len(buf); i += page {
		buf[i] = 1
	}
	fmt.Printf("mem resident=%dMiB\n", *mib)
	stop := stopSignals()
	var deadline <-chan time.Time
	if *seconds > 0 {
		deadline = time.After(time.Duration(*seconds * float64(time.Second)))
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-deadline:
			return
		case <-tick.C:
			for i := 0; i < len(buf); i += page { // keeps the pages hot without CPU to speak of
				buf[i]++
			}
		}
	}
}

func idle(args []string) {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	port := fs.Int("port", 8080, "port to listen on")
	_ = fs.Parse(args)
	runtime.GOMAXPROCS(1)
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	server := &http.Server{Addr: fmt.Sprintf(":%d", *port), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-stopSignals()
		_ = server.Close()
	}()
	if err := server.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}
