//go:build !linux

package main

import "syscall"

// procAttr puts a receiver in a process group of its own: signals go to
// the group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
