package logs

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"
)

type linePipe struct {
	lines chan string
}

func ioPipe() (*linePipe, *io.PipeWriter) {
	r, w := io.Pipe()
	lp := &linePipe{lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lp.lines <- strings.TrimSpace(s.Text())
		}
		close(lp.lines)
	}()
	return lp, w
}

func (p *linePipe) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "<eof>"
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line within 10s")
		return ""
	}
}
