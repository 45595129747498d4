// Package docs holds nogoo9's documentation as Markdown pages; it has no code. Its test checks
// that every relative link in README.md and docs/*.md points at a file that exists (and, for a
// link with a #fragment into a Markdown page, at a heading of that page), so `make test` catches
// a renamed or missing page.
package docs
