package fs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

const xattrName = "user.trainyard.sha256"

var errNoXattr = errors.New("extended attributes not supported")

func setSHA256(f *os.File, sum string) error {
	err := unix.Fsetxattr(int(f.Fd()), xattrName, []byte(sum), 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return errNoXattr
	}
	return err
}

func getSHA256(f *os.File) (string, error) {
	var buf [64]byte
	n, err := unix.Fgetxattr(int(f.Fd()), xattrName, buf[:])
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
