//go:build linux

package main

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleeper waits with a timerfd read through the runtime's poller: the wait ends within
// microseconds of its time, where time.Sleep rounds a wait under a millisecond up to one when the
// process is otherwise idle (the poller's epoll_wait takes whole milliseconds).
type sleeper struct {
	f   *os.File
	fd  uintptr
	buf [8]byte
}

type itimerspec struct {
	interval syscall.Timespec
	value    syscall.Timespec
}

const clockMonotonic = 1

func newSleeper() *sleeper {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic,
		syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return &sleeper{}
	}
	// A non-blocking descriptor: os.NewFile registers it with the runtime's poller, so that a
	// Read parks the goroutine (not the thread) until the timer fires.
	return &sleeper{f: os.NewFile(fd, "timerfd"), fd: fd}
}

func (s *sleeper) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	if s.f == nil {
		time.Sleep(d)
		return
	}
	spec := itimerspec{value: syscall.NsecToTimespec(int64(d))}
	_, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, s.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	if errno != 0 {
		time.Sleep(d)
		return
	}
	if _, err := s.f.Read(s.buf[:]); err != nil {
		time.Sleep(d)
	}
}
