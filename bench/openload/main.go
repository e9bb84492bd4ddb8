// Command openload is an open-model HTTP/1.1 load generator: requests arrive at a fixed rate,
// each sent at its scheduled time whether or not earlier ones were answered, and each one's
// latency counts from the moment it was due, not from when it was sent. A server that falls
// behind therefore shows its queue in the latency (no coordinated omission), as it does to real
// users; a closed loop such as wrk's slows down with the server instead.
//
//	openload -url http://127.0.0.1:8000/ -phases 930:20,155:10 -timeout 10s -slo 1s -json out.json
//
// Flags:
//
//	-url URL          the one URL every request GETs
//	-phases R:S,...   phases of R requests a second for S seconds, one after the other
//	-timeout D        the client's timeout per request (http.Client.Timeout: connect, send, read)
//	-slo D            a 200 answered within D of its due time counts as goodput
//	-poisson          exponential inter-arrival times (mean 1/R) instead of a uniform spacing
//	-seed N           the random seed of -poisson
//	-json FILE        the results, whole (per phase and per second), as JSON
//	-header "N: v"    a request header (repeatable)
//
// The schedule: request i of a phase is due at phase_start + i/R (uniform), or after a sum of
// exponential gaps (-poisson). One scheduler goroutine waits for each due time (a timerfd on
// Linux, read through the runtime's poller, so that a wait shorter than a millisecond is not
// rounded up to one as time.Sleep's is; time.Sleep elsewhere) and starts one goroutine per
// request; when it is late it starts every request already due at once, skipping none. How
// late each one was started ("send lag") is reported: it is the generator's own share of the
// latency and should stay well under a millisecond.
//
// The client: one http.Transport with keep-alive, up to 10,000 idle connections kept, no limit on
// connections per host, no compression, no HTTP/2. A connection busy with a request is not shared,
// so a request due while all are busy opens a new connection, as a new user would; a response
// with "Connection: close" closes its connection. Redirects are not followed. Each body is read
// to its end and discarded.
//
// -sources N spreads the connections over N source addresses of the loopback (127.0.0.2 and
// up), round-robin: with thousands of connections open (a server that stops answering, each
// request then opening a connection of its own) and as many in TIME_WAIT, one source address's
// ~28,000 ephemeral ports fill up and every connect() spends milliseconds searching for a free
// one, on the generator's one core, which then falls behind its schedule. Many users come from
// many addresses anyway. The port is chosen at connect (IP_BIND_ADDRESS_NO_PORT), per address.
//
// Each request ends in one class: a 200, a 503, another status (counted by code), a timeout
// (the client's timeout hit), or a connection error (refused, reset, EOF, ..., counted by kind).
//
// The JSON (-json): "phases", one per phase: its rate and seconds, sent, the count of each
// class, goodput (200s within -slo per second of the phase), answered_rate, the latency of the
// 200s (p50, p90, p99, max) and of the 503s (p50, p99, max) in ms, the send lag, and the same
// for the requests due in the phase's first second ("first_second": how fast a server recovers
// after an overload); "total", the same over the run; "seconds", per second of the run by due
// time: sent, 200, 503, other, timeouts, errors, and the p99 of the 200s and of the 503s. A
// compact summary goes to standard output.
//
// Standard library only: go build in this directory, offline.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type phase struct {
	Rate    float64 `json:"rate"`
	Seconds float64 `json:"seconds"`
}

const (
	pending = iota
	classOK
	class503
	classOther
	classTimeout
	classError
)

// record is one request: filled by the scheduler (due, lag) and by its own goroutine (the rest).
type record struct {
	due    int64 // ns from the start of the run
	lag    int64 // ns from its due time to the scheduler starting it
	lat    int64 // ns from its due time to the response read whole (or to the error)
	class  uint8
	status int16
	kind   string // a connection error's kind
	phase  int
}

type headers []string

func (h *headers) String() string     { return strings.Join(*h, "; ") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

func parsePhases(text string) ([]phase, error) {
	var out []phase
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		rs := strings.SplitN(part, ":", 2)
		if len(rs) != 2 {
			return nil, fmt.Errorf("phase %q is not RATE:SECONDS", part)
		}
		r, err1 := strconv.ParseFloat(rs[0], 64)
		s, err2 := strconv.ParseFloat(rs[1], 64)
		if err1 != nil || err2 != nil || r <= 0 || s <= 0 || math.IsInf(r, 0) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("phase %q: RATE and SECONDS must be numbers above 0", part)
		}
		out = append(out, phase{r, s})
	}
	if len(out) == 0 {
		return nil, errors.New("no phase given")
	}
	return out, nil
}

// schedule: every request's due time (ns from the start) and phase, in order.
func schedule(phases []phase, poisson bool, seed int64) []record {
	rng := rand.New(rand.NewSource(seed))
	var recs []record
	var start float64 // seconds
	for p, ph := range phases {
		if poisson {
			t := rng.ExpFloat64() / ph.Rate
			for t < ph.Seconds {
				recs = append(recs, record{due: int64((start + t) * 1e9), phase: p})
				t += rng.ExpFloat64() / ph.Rate
			}
		} else {
			n := int(math.Round(ph.Rate * ph.Seconds))
			for i := 0; i < n; i++ {
				recs = append(recs, record{due: int64((start + float64(i)/ph.Rate) * 1e9), phase: p})
			}
		}
		start += ph.Seconds
	}
	return recs
}

var digits = regexp.MustCompile(`[0-9]+`)

// classify a failed request: whether it is a timeout, else the kind of connection error.
func classify(err error) (bool, string) {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return true, "timeout"
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return false, "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return false, "reset"
	case errors.Is(err, syscall.EPIPE):
		return false, "broken pipe"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return false, "no local port (EADDRNOTAVAIL)"
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return false, "generator out of file descriptors"
	case errors.Is(err, io.EOF):
		return false, "EOF"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return false, "unexpected EOF"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := digits.ReplaceAllString(err.Error(), "N")
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return false, msg
}

type runner struct {
	client *http.Client
	tmpl   *http.Request
	start  time.Time
	recs   []record
	wg     sync.WaitGroup
}

func (r *runner) fire(i int, due time.Time) {
	defer r.wg.Done()
	rec := &r.recs[i]
	req := r.tmpl.Clone(context.Background())
	resp, err := r.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil {
			rec.lat = int64(time.Since(due))
			rec.status = int16(resp.StatusCode)
			switch resp.StatusCode {
			case 200:
				rec.class = classOK
			case 503:
				rec.class = class503
			default:
				rec.class = classOther
			}
			return
		}
	}
	rec.lat = int64(time.Since(due))
	timeout, kind := classify(err)
	if timeout {
		rec.class = classTimeout
	} else {
		rec.class = classError
		rec.kind = kind
	}
}

func (r *runner) run() {
	sl := newSleeper()
	for i := range r.recs {
		due := r.start.Add(time.Duration(r.recs[i].due))
		if d := time.Until(due); d > 0 {
			sl.sleep(d)
		}
		r.recs[i].lag = int64(time.Since(due))
		r.wg.Add(1)
		go r.fire(i, due)
	}
	r.wg.Wait()
}

// ---------------------------------------------------------------------------------------------
// Results

type pcts struct {
	P50 *float64 `json:"p50"`
	P90 *float64 `json:"p90,omitempty"`
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

func ms(ns int64) *float64 {
	v := math.Round(float64(ns)/1e3) / 1e3
	return &v
}

// percentile: nearest rank of sorted ns values, in ms; nil when there are none.
func percentile(sorted []int64, q float64) *float64 {
	if len(sorted) == 0 {
		return nil
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	if k < 0 {
		k = 0
	}
	if k >= len(sorted) {
		k = len(sorted) - 1
	}
	return ms(sorted[k])
}

func summarize(values []int64, p90 bool) pcts {
	sort.Slice(values, func(a, b int) bool { return values[a] < values[b] })
	out := pcts{P50: percentile(values, 0.50), P99: percentile(values, 0.99), Max: percentile(values, 1)}
	if p90 {
		out.P90 = percentile(values, 0.90)
	}
	return out
}

type phaseResult struct {
	Index        int            `json:"index"`
	Rate         float64        `json:"rate"`
	Seconds      float64        `json:"seconds"`
	StartS       float64        `json:"start_s"`
	Sent         int            `json:"sent"`
	OK           int            `json:"ok"`
	S503         int            `json:"s503"`
	Other        map[string]int `json:"other"`
	OtherTotal   int            `json:"other_total"`
	Timeouts     int            `json:"timeouts"`
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds"`
	Good         int            `json:"good"`
	Goodput      float64        `json:"goodput"`
	AnsweredRate float64        `json:"answered_rate"`
	OKms         pcts           `json:"ok_ms"`
	S503ms       pcts           `json:"s503_ms"`
	LagMs        pcts           `json:"send_lag_ms"`
	FirstSecond  firstSecond    `json:"first_second"`
}

// firstSecond: the requests due in a phase's first second (how a server recovers after overload).
type firstSecond struct {
	Sent     int  `json:"sent"`
	OK       int  `json:"ok"`
	S503     int  `json:"s503"`
	Other    int  `json:"other"`
	Timeouts int  `json:"timeouts"`
	Errors   int  `json:"errors"`
	OKms     pcts `json:"ok_ms"`
	S503ms   pcts `json:"s503_ms"`
}

type second struct {
	T        int      `json:"t"`
	Phase    int      `json:"phase"`
	Sent     int      `json:"sent"`
	OK       int      `json:"ok"`
	S503     int      `json:"s503"`
	Other    int      `json:"other"`
	Timeouts int      `json:"timeouts"`
	Errors   int      `json:"errors"`
	OKp99    *float64 `json:"ok_p99_ms"`
	S503p99  *float64 `json:"s503_p99_ms"`
}

type output struct {
	URL        string        `json:"url"`
	Phases     []phase       `json:"phases_requested"`
	Poisson    bool          `json:"poisson"`
	TimeoutS   float64       `json:"timeout_s"`
	SLOs       float64       `json:"slo_s"`
	Started    string        `json:"started"`
	WallS      float64       `json:"wall_s"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Sources    int           `json:"sources"`
	Results    []phaseResult `json:"phases"`
	Total      phaseResult   `json:"total"`
	Seconds    []second      `json:"seconds"`
}

func aggregate(recs []record, index int, rate, seconds, startS float64, slo time.Duration) phaseResult {
	res := phaseResult{Index: index, Rate: rate, Seconds: seconds, StartS: startS,
		Other: map[string]int{}, ErrorKinds: map[string]int{}}
	var ok, s503, lag, firstOK, first503 []int64
	firstEnd := int64(startS*1e9) + 1e9
	for i := range recs {
		rec := &recs[i]
		if rec.due < firstEnd {
			f := &res.FirstSecond
			f.Sent++
			switch rec.class {
			case classOK:
				f.OK++
				firstOK = append(firstOK, rec.lat)
			case class503:
				f.S503++
				first503 = append(first503, rec.lat)
			case classOther:
				f.Other++
			case classTimeout:
				f.Timeouts++
			default:
				f.Errors++
			}
		}
		res.Sent++
		lag = append(lag, rec.lag)
		switch rec.class {
		case classOK:
			res.OK++
			ok = append(ok, rec.lat)
			if rec.lat <= int64(slo) {
				res.Good++
			}
		case class503:
			res.S503++
			s503 = append(s503, rec.lat)
		case classOther:
			res.OtherTotal++
			res.Other[strconv.Itoa(int(rec.status))]++
		case classTimeout:
			res.Timeouts++
		case classError:
			res.Errors++
			res.ErrorKinds[rec.kind]++
		default:
			res.ErrorKinds["unfinished"]++
			res.Errors++
		}
	}
	res.Goodput = math.Round(float64(res.Good)/seconds*10) / 10
	res.AnsweredRate = math.Round(float64(res.OK+res.S503+res.OtherTotal)/seconds*10) / 10
	res.OKms = summarize(ok, true)
	res.S503ms = summarize(s503, false)
	res.LagMs = summarize(lag, true)
	res.FirstSecond.OKms = summarize(firstOK, false)
	res.FirstSecond.S503ms = summarize(first503, false)
	return res
}

func perSecond(recs []record) []second {
	var out []second
	var ok, s503 [][]int64
	for i := range recs {
		rec := &recs[i]
		t := int(rec.due / 1e9)
		for len(out) <= t {
			out = append(out, second{T: len(out), Phase: rec.phase})
			ok = append(ok, nil)
			s503 = append(s503, nil)
		}
		b := &out[t]
		b.Sent++
		switch rec.class {
		case classOK:
			b.OK++
			ok[t] = append(ok[t], rec.lat)
		case class503:
			b.S503++
			s503[t] = append(s503[t], rec.lat)
		case classOther:
			b.Other++
		case classTimeout:
			b.Timeouts++
		default:
			b.Errors++
		}
	}
	for t := range out {
		out[t].OKp99 = summarize(ok[t], false).P99
		out[t].S503p99 = summarize(s503[t], false).P99
	}
	return out
}

func fmtMs(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v < 10 {
		return fmt.Sprintf("%.2fms", *v)
	}
	return fmt.Sprintf("%.0fms", *v)
}

func printPhase(name string, p phaseResult) {
	fmt.Printf("%s: %g req/s x %gs: sent %d | 200 %d (goodput %.1f/s) | 503 %d | other %d | timeouts %d | errors %d\n",
		name, p.Rate, p.Seconds, p.Sent, p.OK, p.Goodput, p.S503, p.OtherTotal, p.Timeouts, p.Errors)
	fmt.Printf("    200 latency p50 %s p90 %s p99 %s max %s | 503 p50 %s p99 %s max %s | send lag p99 %s max %s\n",
		fmtMs(p.OKms.P50), fmtMs(p.OKms.P90), fmtMs(p.OKms.P99), fmtMs(p.OKms.Max),
		fmtMs(p.S503ms.P50), fmtMs(p.S503ms.P99), fmtMs(p.S503ms.Max), fmtMs(p.LagMs.P99), fmtMs(p.LagMs.Max))
	if len(p.Other) > 0 {
		fmt.Printf("    other statuses: %v\n", p.Other)
	}
	if len(p.ErrorKinds) > 0 {
		fmt.Printf("    errors: %v\n", p.ErrorKinds)
	}
}

func main() {
	target := flag.String("url", "", "the URL every request GETs (http://127.0.0.1:PORT/path)")
	phasesText := flag.String("phases", "", "RATE:SECONDS,... e.g. 930:20,155:10")
	timeout := flag.Duration("timeout", 10*time.Second, "client timeout per request")
	slo := flag.Duration("slo", time.Second, "a 200 within this latency (from its due time) counts as goodput")
	poisson := flag.Bool("poisson", false, "exponential inter-arrival times instead of uniform spacing")
	seed := flag.Int64("seed", 1, "random seed of -poisson")
	jsonPath := flag.String("json", "", "write the results to this JSON file")
	sources := flag.Int("sources", 0, "spread connections over this many loopback source addresses "+
		"(127.0.0.2, ...; a loopback -url only); 0: the kernel's choice")
	var hdrs headers
	flag.Var(&hdrs, "header", `a request header "Name: value" (repeatable)`)
	flag.Parse()

	fail := func(format string, a ...interface{}) {
		fmt.Fprintf(os.Stderr, "openload: "+format+"\n", a...)
		os.Exit(2)
	}
	if *target == "" || *phasesText == "" {
		fail("-url and -phases are required (see -h)")
	}
	phases, err := parsePhases(*phasesText)
	if err != nil {
		fail("%v", err)
	}
	tmpl, err := http.NewRequest("GET", *target, nil)
	if err != nil || tmpl.URL.Scheme != "http" {
		fail("bad -url %q (http:// only): %v", *target, err)
	}
	for _, h := range hdrs {
		name, value, found := strings.Cut(h, ":")
		if !found {
			fail("bad -header %q: want \"Name: value\"", h)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if strings.EqualFold(name, "Host") {
			tmpl.Host = value
		} else {
			tmpl.Header.Add(name, value)
		}
	}

	dial, err := dialer(tmpl.URL, *sources, *timeout)
	if err != nil {
		fail("%v", err)
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		MaxIdleConns:          0, // no limit
		MaxIdleConnsPerHost:   10000,
		MaxConnsPerHost:       0, // no limit
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: 0,
	}
	client := &http.Client{
		Transport:     transport,
		Timeout:       *timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	// Fewer collections: the heap is small (a record a request) and the core is the generator's.
	debug.SetGCPercent(400)

	recs := schedule(phases, *poisson, *seed)
	r := &runner{client: client, tmpl: tmpl, recs: recs}
	started := time.Now()
	r.start = started.Add(20 * time.Millisecond) // the first request is due a moment after the start
	r.run()
	wall := time.Since(started)
	transport.CloseIdleConnections()

	out := output{URL: *target, Phases: phases, Poisson: *poisson, TimeoutS: timeout.Seconds(), SLOs: slo.Seconds(),
		Sources: *sources,
		Started: started.Format(time.RFC3339Nano), WallS: math.Round(wall.Seconds()*1000) / 1000,
		GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var startS, total float64
	lo := 0
	for p, ph := range phases {
		hi := lo
		for hi < len(recs) && recs[hi].phase == p {
			hi++
		}
		res := aggregate(recs[lo:hi], p, ph.Rate, ph.Seconds, startS, *slo)
		out.Results = append(out.Results, res)
		printPhase(fmt.Sprintf("phase %d", p+1), res)
		startS += ph.Seconds
		total += ph.Seconds
		lo = hi
	}
	out.Total = aggregate(recs, -1, float64(len(recs))/total, total, 0, *slo)
	out.Total.Rate = math.Round(out.Total.Rate*10) / 10
	if len(phases) > 1 {
		printPhase("total", out.Total)
	}
	out.Seconds = perSecond(recs)
	if *jsonPath != "" {
		data, err := json.MarshalIndent(out, "", " ")
		if err == nil {
			err = os.WriteFile(*jsonPath, append(data, '\n'), 0o644)
		}
		if err != nil {
			fail("writing %s: %v", *jsonPath, err)
		}
	}
}
