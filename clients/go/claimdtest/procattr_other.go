//go:build !linux

package claimdtest

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
