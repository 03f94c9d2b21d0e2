package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The list of design.md's "A record's path": one numbered entry per
// function, `file.go` `Type.Method` or `file.go` `Func`, the file relative
// to the repository's root.
const pathHeading = "## A record's path"

var (
	pathEntry = regexp.MustCompile("(?m)^(\\d+)\\. `([^`]+)` `([^`]+)`(.*)$")
	// pathStage is a stage's heading, a line in bold; its entries follow.
	pathStage = regexp.MustCompile(`^\*\*([^*]+)\*\*$`)
	// pathCount is a sentence of the section stating the counts of the
	// list, for the path from "gateway" or from the consumer's "fetch":
	// calls into another file, transitions with the returns, files.
	pathCount = regexp.MustCompile(`(Gateway|Fetch) to commit: \*\*(\d+)\*\* calls into another file, (\d+) transitions with the returns, over (\d+) files`)
	// stageRow is a row of the section's table of counts by stage: the
	// stage's heading, its entries, calls into another file and
	// transitions with the returns (the one into the stage included),
	// files.
	stageRow = regexp.MustCompile(`(?m)^\| ([^|]+?) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$`)
)

// pathStep is one entry of the list.
type pathStep struct {
	n                 int
	file, name, stage string
	// back is an entry marked ↩: the data returns to a caller listed
	// before, so the transition into it retraces a call.
	back bool
}

// recordsPath returns the section's entries, in order, and the section.
func recordsPath(t *testing.T) ([]pathStep, string) {
	t.Helper()
	doc, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n"+pathHeading+"\n")
	if !ok {
		t.Fatalf("design.md has no section %q", pathHeading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var steps []pathStep
	stage := ""
	for line := range strings.Lines(section) {
		line = strings.TrimSuffix(line, "\n")
		if m := pathStage.FindStringSubmatch(line); m != nil {
			stage = m[1]
			continue
		}
		m := pathEntry.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, pathStep{n: n, file: m[2], name: m[3], stage: stage, back: strings.Contains(m[4], "↩")})
	}
	if len(steps) < 20 {
		t.Fatalf("design.md's %q lists %d functions: is its list still in the form 1. `file.go` `Type.Method`?", pathHeading, len(steps))
	}
	return steps, section
}

// TestTheRecordsPathNamesFunctionsThatExist holds every entry of
// design.md's list of a record's path to a function defined in the file
// it names, so that a renamed, moved or removed function cannot leave the
// list describing code that is gone.
func TestTheRecordsPathNamesFunctionsThatExist(t *testing.T) {
	t.Parallel()
	steps, _ := recordsPath(t)
	defined := map[string]map[string]bool{}
	for i, s := range steps {
		if s.n != i+1 {
			t.Errorf("entry %d is numbered %d: the list is read in order", i+1, s.n)
		}
		funcs, ok := defined[s.file]
		if !ok {
			funcs = funcsOf(t, s.file)
			defined[s.file] = funcs
		}
		if funcs != nil && !funcs[s.name] {
			t.Errorf("entry %d: %s defines no %s", s.n, s.file, s.name)
		}
	}
}

// TestTheRecordsPathCountsMatchItsList recounts the file-to-file
// transitions of the list (consecutive entries in different files) and
// the files it passes through, from the gateway and from the consumer's
// first entry, and compares them with what the section states.
func TestTheRecordsPathCountsMatchItsList(t *testing.T) {
	t.Parallel()
	steps, section := recordsPath(t)
	fetch := -1
	for i, s := range steps {
		if strings.HasPrefix(s.file, "consumer/") {
			fetch = i
			break
		}
	}
	if fetch < 0 {
		t.Fatal("the list has no entry in consumer/: where does the consumer's fetch begin?")
	}
	want := map[string]crossings{
		"Gateway": count(steps),
		"Fetch":   count(steps[fetch:]),
	}
	var rows []string
	for i := 0; i < len(steps); {
		j := i
		for j < len(steps) && steps[j].stage == steps[i].stage {
			j++
		}
		c := count(steps[i:j])
		if i > 0 && steps[i-1].file != steps[i].file {
			c.transitions++
			if !steps[i].back {
				c.calls++
			}
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %d | %d | %d |", steps[i].stage, j-i, c.calls, c.transitions, c.files))
		i = j
	}
	if *update {
		rewritePathCounts(t, want, rows)
		return
	}

	stated := pathCount.FindAllStringSubmatch(section, -1)
	if len(stated) != 2 {
		t.Fatalf("the section states %d counts; want the two sentences matching %s", len(stated), pathCount)
	}
	for _, m := range stated {
		var got crossings
		got.calls, _ = strconv.Atoi(m[2])
		got.transitions, _ = strconv.Atoi(m[3])
		got.files, _ = strconv.Atoi(m[4])
		if w := want[m[1]]; got != w {
			t.Errorf("the section states %q; its list counts %d calls into another file, %d transitions with the returns, over %d files (make docs rewrites them)", m[0], w.calls, w.transitions, w.files)
		}
	}
	if got := stageRow.FindAllString(section, -1); !slices.Equal(got, rows) {
		t.Errorf("the section's table by stage is not its list's (make docs rewrites it); want:\n%s", strings.Join(rows, "\n"))
	}
}

// rewritePathCounts writes the counts of the list into design.md's
// sentences and its table by stage, for make docs.
func rewritePathCounts(t *testing.T, want map[string]crossings, rows []string) {
	t.Helper()
	doc, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	out := pathCount.ReplaceAllStringFunc(string(doc), func(sentence string) string {
		m := pathCount.FindStringSubmatch(sentence)
		w := want[m[1]]
		return fmt.Sprintf("%s to commit: **%d** calls into another file, %d transitions with the returns, over %d files", m[1], w.calls, w.transitions, w.files)
	})
	table := stageRow.FindAllStringIndex(out, -1)
	if len(table) == 0 {
		t.Fatal("design.md has no table by stage to rewrite")
	}
	out = out[:table[0][0]] + strings.Join(rows, "\n") + out[table[len(table)-1][1]:]
	if err := os.WriteFile("design.md", []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// crossings are the counts of a stretch of the list.
type crossings struct {
	// calls are the consecutive steps in different files where the
	// second is no return: the reader opens another file to follow a call.
	calls int
	// transitions are all the consecutive steps in different files, a
	// return to a caller's file counting again.
	transitions int
	// files are the files the steps are in.
	files int
}

// count counts the crossings of steps.
func count(steps []pathStep) crossings {
	var c crossings
	files := map[string]bool{}
	for i, s := range steps {
		files[s.file] = true
		if i > 0 && steps[i-1].file != s.file {
			c.transitions++
			if !s.back {
				c.calls++
			}
		}
	}
	c.files = len(files)
	return c
}

// funcsOf returns the functions defined in file, a path from the
// repository's root: Name for a function, Type.Name for a method. It
// reports an error, and returns nil, when the file does not parse.
func funcsOf(t *testing.T, file string) map[string]bool {
	t.Helper()
	if filepath.IsAbs(file) || strings.Contains(file, "..") || !strings.HasSuffix(file, ".go") {
		t.Errorf("%s: not a Go file's path from the repository's root", file)
		return nil
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", file), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("%s: %v", file, err)
		return nil
	}
	funcs := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = receiverType(fd.Recv.List[0].Type) + "." + name
		}
		funcs[name] = true
	}
	return funcs
}

// receiverType is the name of a receiver's type: T of T, *T, T[K] and *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
