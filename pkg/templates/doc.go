// Package templates decodes workspace templates and keeps the registry of their valid versions.
//
// A template is a ConfigMap labelled nogoo9/pod-template=true (or a YAML file of the same shape in
// --template-dir) with a version annotation and a PodSpec as JSON under data.spec. Decoding is
// strict: an unknown field, bad JSON, a missing container or a missing version makes that template
// invalid with a message naming the key, the field and the line. The Registry serves the last valid
// version of every template, reports invalid ones (Event, log line, List) and tells subscribers
// when a template changes. docs/templates.md is the user's guide.
package templates
