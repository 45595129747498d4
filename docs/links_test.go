package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// pages are the Markdown files whose links are checked, relative to the repository root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		out = append(out, rel)
	}
	slices.Sort(out[1:])
	return out
}

// TestRelativeLinksResolve checks every relative link of README.md and docs/*.md: the file or
// directory it names exists inside the repository, and a #fragment into a Markdown page names one
// of its headings. Links with a scheme (https:, mailto:) are not followed: CI has no internet.
func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := pages(t, root)
	broken := checkLinks(root, files)
	if len(broken) > 0 {
		t.Errorf("%d broken relative link(s) in %s; fix the link or create the page it names:\n%s",
			len(broken), strings.Join(files, ", "), strings.Join(broken, "\n"))
	}
}

// TestLinkCheckerFindsBrokenLinks runs the checker on a small tree made here, so a checker that
// silently accepts everything cannot pass.
func TestLinkCheckerFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config/samples/a.yaml", "x")
	write("docs/other.md", "# Other page\n\n## Tuning for bulk upgrades\n\n## `--flag` and *more*\n\n## Repeated\n\n## Repeated\n")
	write("README.md", "[ok](docs/other.md) [ok](docs/other.md#tuning-for-bulk-upgrades) [ok](https://example.com/x.md)\n"+
		"[missing](docs/nope.md) [bad anchor](docs/other.md#no-such-heading)\n"+
		"```\n[in a code block](not-checked.md)\n```\n"+
		"`[in code](not-checked-either.md)` [ok](#a-heading)\n\n# A heading\n")
	write("docs/page.md", "[ok](other.md#--flag-and-more) [ok](other.md#repeated-1) [ok](../config/samples)\n"+
		"[outside](../../elsewhere.md) [ok](mailto:someone@example.com)\n[ref]: missing-ref.md\n[ok]: other.md\n")

	got := checkLinks(root, []string{"README.md", "docs/page.md"})
	want := []string{
		"README.md:2: docs/nope.md: no such file",
		"README.md:2: docs/other.md#no-such-heading: docs/other.md has no heading with anchor #no-such-heading",
		"docs/page.md:2: ../../elsewhere.md: points outside the repository",
		"docs/page.md:3: missing-ref.md: no such file",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkLinks:\n got %q\nwant %q", got, want)
	}
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an optional "title".
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [name]: target
	refDef  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	scheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlID  = regexp.MustCompile(`<a\s[^>]*(?:name|id)="([^"]+)"`)
	fence   = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// checkLinks returns one line per broken relative link in files (relative to root):
// "file:line: target: reason".
func checkLinks(root string, files []string) []string {
	var broken []string
	anchors := map[string]map[string]bool{} // by absolute path of a Markdown page
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		a := map[string]bool{}
		if err == nil {
			a = headingAnchors(string(data))
		}
		anchors[path] = a
		return a
	}
	for _, file := range files {
		abs := filepath.Join(root, file)
		data, err := os.ReadFile(abs)
		if err != nil {
			broken = append(broken, fmt.Sprintf("%s: cannot read: %v", file, err))
			continue
		}
		for _, l := range links(string(data)) {
			reason := checkLink(root, abs, l.target, anchorsOf)
			if reason != "" {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", file, l.line, l.target, reason))
			}
		}
	}
	return broken
}

// checkLink returns why target, a link in the page at abs, is broken, or "" if it resolves.
func checkLink(root, abs, target string, anchorsOf func(string) map[string]bool) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // absolute URL: not checked
	}
	path, frag, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	dest := abs
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Join(root, path) // repository-root relative, as GitHub renders it
		} else {
			dest = filepath.Join(filepath.Dir(abs), path)
		}
		if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return "" // fragments into code files (#L10) are GitHub's business
	}
	if !anchorsOf(dest)[strings.ToLower(frag)] {
		rel, _ := filepath.Rel(root, dest)
		return fmt.Sprintf("%s has no heading with anchor #%s", filepath.ToSlash(rel), frag)
	}
	return ""
}

type link struct {
	line   int
	target string
}

// links returns the link targets of a Markdown page with their line numbers, leaving out fenced
// code blocks and inline code.
func links(md string) []link {
	var out []link
	inFence := false
	for i, line := range strings.Split(md, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = stripCode(line)
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{i + 1, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// stripCode blanks inline code spans (one or more backticks on each side), so a link shown as
// code is not checked.
func stripCode(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		closing := strings.Index(string(b[i+n:]), strings.Repeat("`", n))
		if closing < 0 {
			break
		}
		end := i + n + closing + n
		for j := i; j < end; j++ {
			b[j] = ' '
		}
		i = end
	}
	return string(b)
}

// headingAnchors returns the anchors GitHub gives the headings of a page (lower-case, punctuation
// dropped, spaces to hyphens, -1, -2... for repeats), plus explicit <a name/id="..."> anchors.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var (
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
)

// slug is GitHub's anchor for a heading's text.
func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
