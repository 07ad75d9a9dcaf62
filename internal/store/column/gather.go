package column

// Gather collects query rows in fixed-size chunks joined once at the end,
// so that a large result (the control loop reads every active job each
// cycle) is not copied over and over as one slice grows: every growth of
// a large slice is a fresh allocation whose pages the process touches for
// the first time. The zero value is ready to use; sizeHint (a page limit,
// or 0) sizes the first chunk.
type Gather[T any] struct {
	done  [][]T
	cur   []T
	total int
}

// gatherChunk is the number of rows per chunk.
const gatherChunk = 4096

// Add appends one row.
func (g *Gather[T]) Add(v T, sizeHint int) {
	if g.cur == nil {
		g.cur = make([]T, 0, min(max(sizeHint, 16), gatherChunk))
	}
	if len(g.cur) == cap(g.cur) && len(g.cur) >= gatherChunk {
		g.done = append(g.done, g.cur)
		g.cur = make([]T, 0, gatherChunk)
	}
	g.cur = append(g.cur, v)
	g.total++
}

// Rows returns every row added, in order.
func (g *Gather[T]) Rows() []T {
	if len(g.done) == 0 {
		if g.cur == nil {
			return []T{}
		}
		return g.cur
	}
	out := make([]T, 0, g.total)
	for _, c := range g.done {
		out = append(out, c...)
	}
	return append(out, g.cur...)
}
