package statuspage

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRenderShowsFactsAndTablesAndEscapesValues(t *testing.T) {
	t.Parallel()
	body, err := Render(Page{
		Title: "ferry-test",
		Facts: []Fact{{Name: "ready", Value: "no: draining", Bad: true}},
		Sections: []Section{
			{Title: "Tenants", Columns: []string{"tenant", "series"}, Rows: []Row{{Cells: []string{"<script>x</script>", "12"}}}},
			{Title: "Retrying", Empty: "no tenant is being retried"},
		},
		Generated: time.Unix(0, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	html := string(body)
	for _, want := range []string{
		"<title>ferry-test</title>", `<dd class="bad">no: draining</dd>`, "<th>tenant</th><th>series</th>",
		"<td>&lt;script&gt;x&lt;/script&gt;</td><td>12</td>", "no tenant is being retried", `content="5"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "<script>") {
		t.Error("a value was not escaped")
	}
}

func TestHandlerServesHTMLUncached(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(func() Page { return Page{Title: "ferry-test"} }, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		resp.Header.Get("Cache-Control") != "no-store" || !strings.Contains(string(body), "ferry-test") {
		t.Errorf("got %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, got, want string }{
		{"no age is 0s", Age(0), "0s"},
		{"an age under a second keeps milliseconds", Age(1234 * time.Microsecond), "1ms"},
		{"an age over a second is rounded to seconds", Age(90*time.Second + 400*time.Millisecond), "1m30s"},
		{"bytes under a KiB are bytes", Bytes(1000), "1000 B"},
		{"bytes are shown in the largest binary unit", Bytes(3 << 20), "3.0 MiB"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
