package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestServicesReachStoreThroughInterfaces keeps each aggregate service to
// its own store interface. The compiler already holds a service's methods
// to the interface of its st field; this test closes the ways around it:
// nothing but Config names the whole store.Store (apart from the
// "var _ X = store.Store(nil)" checks), nothing reads Config.Store but New,
// and each interface lists only what its service calls.
func TestServicesReachStoreThroughInterfaces(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}

	isWholeStore := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "store" && sel.Sel.Name == "Store"
	}

	// The whole store is named only by Config.Store and by the checks
	// that the whole store satisfies an interface.
	allowed := map[ast.Expr]bool{}
	ifaces := map[string][]string{}  // interface type → its methods
	serviceOf := map[string]string{} // service type → the type of its st field
	holderOf := map[string]string{}  // type → the service type of its s field (a *JobService)
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, sp := range g.Specs {
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					if len(sp.Names) == 1 && sp.Names[0].Name == "_" && len(sp.Values) == 1 {
						if c, ok := sp.Values[0].(*ast.CallExpr); ok && isWholeStore(c.Fun) {
							allowed[c.Fun] = true
						}
					}
				case *ast.TypeSpec:
					switch tt := sp.Type.(type) {
					case *ast.InterfaceType:
						for _, m := range tt.Methods.List {
							for _, n := range m.Names {
								ifaces[sp.Name.Name] = append(ifaces[sp.Name.Name], n.Name)
							}
						}
					case *ast.StructType:
						for _, fld := range tt.Fields.List {
							if sp.Name.Name == "Config" && len(fld.Names) == 1 && fld.Names[0].Name == "Store" {
								allowed[fld.Type] = true
							}
							if star, ok := fld.Type.(*ast.StarExpr); ok && len(fld.Names) == 1 && fld.Names[0].Name == "s" {
								if id, ok := star.X.(*ast.Ident); ok {
									holderOf[sp.Name.Name] = id.Name
								}
							}
							if len(fld.Names) == 1 && fld.Names[0].Name == "st" {
								if id, ok := fld.Type.(*ast.Ident); ok {
									serviceOf[sp.Name.Name] = id.Name
								} else {
									t.Errorf("%s.st is a %s; give it an interface declared in this package", sp.Name.Name, exprString(fld.Type))
								}
							}
						}
					}
				}
			}
		}
	}

	used := map[string]map[string]bool{} // service type → store methods its methods call
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if e, ok := n.(ast.Expr); ok && isWholeStore(e) && !allowed[e] {
				t.Errorf("%s names store.Store; a service reaches the store only through its own interface", fset.Position(e.Pos()))
			}
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Store" {
				if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "cfg" {
					t.Errorf("%s reads cfg.Store; New hands each service its interface and clears it", fset.Position(sel.Pos()))
				}
			}
			return true
		})
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil {
				continue
			}
			recv := fn.Recv.List[0].Type
			if st, ok := recv.(*ast.StarExpr); ok {
				recv = st.X
			}
			id, ok := recv.(*ast.Ident)
			if !ok {
				continue
			}
			// A type that holds its service as s (a LogStream) calls
			// the service's store as x.s.st.
			svc := id.Name
			if serviceOf[svc] == "" {
				svc = holderOf[svc]
			}
			if serviceOf[svc] == "" {
				continue
			}
			if used[svc] == nil {
				used[svc] = map[string]bool{}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.SelectorExpr); ok && x.Sel.Name == "st" {
						used[svc][n.Sel.Name] = true
					}
				case *ast.CallExpr:
					// store.AuditRecords(ctx, s.st, …) reads through store.Audits.
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && exprString(sel) == "store.AuditRecords" {
						used[svc]["AppendAudit"] = true
						used[svc]["ListAudit"] = true
					}
					// store.RecordResume(ctx, s.st, …) marks the checkpoint.
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && exprString(sel) == "store.RecordResume" {
						used[svc]["MarkCheckpointResumed"] = true
					}
				}
				return true
			})
		}
	}

	if len(serviceOf) < 10 {
		t.Errorf("found %d services with a store interface, want the 9 aggregates and the core: %v", len(serviceOf), serviceOf)
	}
	for svc, iface := range serviceOf {
		methods, ok := ifaces[iface]
		if !ok {
			t.Errorf("%s.st is a %s, which is no interface declared in this package", svc, iface)
			continue
		}
		if svc == "core" {
			continue // its methods are shared; checked by the compiler only
		}
		var unused []string
		for _, m := range methods {
			if !used[svc][m] {
				unused = append(unused, m)
			}
		}
		if len(unused) > 0 {
			sort.Strings(unused)
			t.Errorf("%s lists %s, which %s never calls; drop them", iface, strings.Join(unused, ", "), svc)
		}
	}
}

// exprString renders a selector chain ("store.Store", "s.st").
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	}
	return "?"
}
