package claimdtest

import "syscall"

// procAttr makes the kernel kill claimd when the test binary dies (a panic
// or a -timeout), so no server outlives its test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
