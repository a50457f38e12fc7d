package compat

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MemberArgs are the member mode's positional arguments (the line protocol of
// tests/compat/java/GroupConsume.java).
type MemberArgs struct {
	Bootstrap      []string
	Topic, Group   string
	SessionTimeout time.Duration
	MaxRate        float64
	// Protocol is "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848).
	Protocol string
}

// ParseMember reads "bootstrap topic group session_ms max_rate protocol".
func ParseMember(args []string) MemberArgs {
	if len(args) != 6 {
		Fail("setup", errUsage("member bootstrap topic group session_ms max_rate classic|consumer"))
	}
	sessionMs, err := strconv.Atoi(args[3])
	if err != nil {
		Fail("setup", err)
	}
	rate, err := strconv.ParseFloat(args[4], 64)
	if err != nil {
		Fail("setup", err)
	}
	return MemberArgs{strings.Split(args[0], ","), args[1], args[2], time.Duration(sessionMs) * time.Millisecond, rate, args[5]}
}

type errUsage string

func (e errUsage) Error() string { return "usage: " + string(e) }

// WaitForStop returns a channel closed when stdin says "stop" or ends.
func WaitForStop() <-chan struct{} {
	stop := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			if strings.TrimSpace(scanner.Text()) == "stop" {
				break
			}
		}
		close(stop)
	}()
	return stop
}

// Pace sleeps so that processing n records since started took at least n / rate seconds.
func Pace(n int, rate float64, started time.Time) {
	budget := time.Duration(float64(n) / rate * float64(time.Second))
	if rest := budget - time.Since(started); rest > 0 {
		time.Sleep(rest)
	}
}

// JoinPartitions is "0,1,2" for a member's assigned or revoked partitions, sorted.
func JoinPartitions(partitions []int32) string {
	sorted := append([]int32(nil), partitions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	parts := make([]string, len(sorted))
	for i, p := range sorted {
		parts[i] = strconv.Itoa(int(p))
	}
	return strings.Join(parts, ",")
}

// StdinRecords reads the roundtrip mode's records: "key<TAB>value" lines.
func StdinRecords() [][2]string {
	var records [][2]string
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		key, value, _ := strings.Cut(scanner.Text(), "\t")
		records = append(records, [2]string{key, value})
	}
	return records
}

var stepper *bufio.Scanner

// Step prints one admin step (a JSON line) and waits for the driver's "next" on stdin, so the
// driver can check the step on the broker directly before the next one changes it.
func Step(event, topic, detail string) {
	Note(event, topic, detail)
	if stepper == nil {
		stepper = bufio.NewScanner(os.Stdin)
	}
	if !stepper.Scan() {
		Fail("admin", errUsage("stdin ended before \"next\""))
	}
}

// Limiter lets at most rate events per second through Wait, across goroutines (a client
// that processes partitions in parallel still processes at the member's rate).
type Limiter struct {
	mu   sync.Mutex
	next time.Time
	gap  time.Duration
}

// NewLimiter allows rate events per second.
func NewLimiter(rate float64) *Limiter {
	return &Limiter{gap: time.Duration(float64(time.Second) / rate)}
}

// Wait blocks until the next event may happen.
func (l *Limiter) Wait() {
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = l.next.Add(l.gap)
	l.mu.Unlock()
	time.Sleep(time.Until(at))
}
