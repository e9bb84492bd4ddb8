//go:build !linux

package main

import "time"

// sleeper: time.Sleep where there is no timerfd.
type sleeper struct{}

func newSleeper() *sleeper { return &sleeper{} }

func (s *sleeper) sleep(d time.Duration) { time.Sleep(d) }
