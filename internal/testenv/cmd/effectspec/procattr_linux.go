package main

import "syscall"

// procAttr puts a receiver in a process group of its own (signals go to the
// group) and has the kernel kill it when effectspec dies, so that no
// receiver outlives a run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
