package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"
)

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT: a socket bound to an address with port
// 0 gets its port at connect, unique per (source, destination), not at bind, unique per source.
const ipBindAddressNoPort = 24

// dialer: the transport's DialContext; with sources > 0, each new connection from the next of
// `sources` loopback addresses (127.0.0.2, 127.0.0.3, ...), round-robin.
func dialer(target *url.URL, sources int, timeout time.Duration) (func(context.Context, string, string) (net.Conn, error), error) {
	base := &net.Dialer{Timeout: timeout, KeepAlive: -1}
	if sources <= 0 {
		return base.DialContext, nil
	}
	host := target.Hostname()
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil, fmt.Errorf("-sources needs an IPv4 loopback -url host, not %q", host)
	}
	if sources > 250 {
		return nil, fmt.Errorf("-sources: at most 250")
	}
	dialers := make([]*net.Dialer, sources)
	for i := range dialers {
		dialers[i] = &net.Dialer{
			Timeout:   timeout,
			KeepAlive: -1,
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))},
			Control: func(network, address string, c syscall.RawConn) error {
				// Where the option is unknown, the port is chosen at bind: slower, still correct.
				return c.Control(func(fd uintptr) {
					_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
				})
			},
		}
	}
	var next uint64
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		d := dialers[atomic.AddUint64(&next, 1)%uint64(len(dialers))]
		return d.DialContext(ctx, network, address)
	}, nil
}
