// Package statuspage renders the page every Ferry process serves at / of
// its HTTP port: a few facts and tables an operator reads at a glance,
// server-rendered with html/template, no script, refreshed by the browser
// every few seconds. What goes on it is the caller's; this package only
// lays it out, so internal/ needs no consumer or pusher types.
package statuspage

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"time"
)

// Page is one status page.
type Page struct {
	// Title names the process, such as "ferry-consumer consumer-3".
	Title string
	// Facts are short name/value lines shown first.
	Facts []Fact
	// Sections are tables.
	Sections []Section
	// Generated is when the page was built.
	Generated time.Time
}

// Fact is one name and value.
type Fact struct {
	Name, Value string
	// Bad marks a value that needs attention (shown in red).
	Bad bool
}

// Section is a table with a title.
type Section struct {
	Title string
	// Note is a line under the title, saying what the table shows.
	Note    string
	Columns []string
	Rows    []Row
	// Empty is shown instead of the table when there are no rows.
	Empty string
}

// Row is one line of a table.
type Row struct {
	Cells []string
	// Bad marks a row that needs attention (shown in red).
	Bad bool
}

//go:embed page.html
var files embed.FS

var page = template.Must(template.ParseFS(files, "page.html"))

// RefreshSeconds is how often the browser reloads the page.
const RefreshSeconds = 5

// Render writes p as HTML to a buffer and returns it.
func Render(p Page) ([]byte, error) {
	var b bytes.Buffer
	if err := page.Execute(&b, struct {
		Page
		Refresh int
	}{p, RefreshSeconds}); err != nil {
		return nil, fmt.Errorf("render status page: %w", err)
	}
	return b.Bytes(), nil
}

// Handler serves the page build returns, built afresh for every request.
func Handler(build func() Page, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		body, err := Render(build())
		if err != nil {
			logger.Error("status page", "err", err)
			http.Error(w, "status page failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	})
}

// Age renders a duration for a table: rounded, "0s" for none.
func Age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// Bytes renders a size in bytes with a binary unit.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
