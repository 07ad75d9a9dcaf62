// Package userdb is this machine's user database as the local executor
// needs it (local.Users), through os/user: with cgo, the C library's, so
// that users from NSS (LDAP, SSSD) count too.
//
// It is a package of its own so that package local, which the attempt
// supervisor links, links neither os/user nor the C library: the
// supervisor stays a static binary, cheaper to start for every attempt.
package userdb

import (
	"fmt"
	"os/user"
	"strconv"
)

// System is the user database of this machine.
type System struct{}

// Lookup finds a user by name, or by id when name is numeric.
func (System) Lookup(name string) (uid, gid int, username string, err error) {
	var u *user.User
	if _, perr := strconv.Atoi(name); perr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return 0, 0, "", err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return 0, 0, "", fmt.Errorf("user %s has a non-numeric uid %q or gid %q", name, u.Uid, u.Gid)
	}
	return uid, gid, u.Username, nil
}

// IDInUse reports whether a user or a group of this machine has id n.
func (System) IDInUse(n int) bool {
	s := strconv.Itoa(n)
	if _, err := user.LookupId(s); err == nil {
		return true
	}
	_, err := user.LookupGroupId(s)
	return err == nil
}

// Current returns the name of the user this process runs as.
func (System) Current() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
