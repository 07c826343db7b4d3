// Package spectest validates HTTP responses of a floe node against the
// Apache Iceberg REST catalog OpenAPI specification.
//
// End-to-end tests talk to a real floe node over HTTP, usually through
// iceberg-go's REST client. Every response they receive should be checked
// against the spec, which lives outside this repository at
// ../shared/spec/rest-catalog-open-api.yaml relative to the repository root
// (see SpecPath; the FLOE_SPEC environment variable overrides the location).
//
// # Hooking into iceberg-go's REST client
//
// iceberg-go (v0.7.0) accepts a caller-owned http.RoundTripper through
// rest.WithCustomTransport. The catalog wraps it in its own session transport
// (which adds auth and default headers), so the validating transport sees the
// final request exactly as it goes on the wire, including the bootstrap
// GET /v1/config and, unless an OAuth TLS config is set, the OAuth token
// exchange. WithCustomTransport replaces the whole transport: NewCatalog
// rejects it together with rest.WithTLSConfig, so pass a configured base
// transport to Wrap/NewTransport instead (rest.WithTransportFactory is the
// catalog-owned alternative and works the same way).
//
//	func TestCatalogE2E(t *testing.T) {
//		tr := spectest.Wrap(t, nil) // nil base: http.DefaultTransport
//		cat, err := rest.NewCatalog(ctx, "floe", node.URL,
//			rest.WithCustomTransport(tr))
//		require.NoError(t, err)
//
//		require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"a"}, nil))
//		_, err = cat.LoadNamespaceProperties(ctx, table.Identifier{"a"})
//		require.NoError(t, err)
//
//		// Guard against a test that silently validates nothing
//		// (getConfig + createNamespace + loadNamespaceMetadata).
//		assert.GreaterOrEqual(t, tr.Count(), 3)
//		assert.Positive(t, tr.Operations()["loadNamespaceMetadata"])
//	}
//
// Every response that does not conform is reported with t.Errorf (method,
// path, status and the validation error); the response itself is handed to
// the caller unchanged. NewTransport is the same as Wrap but returns a plain
// http.RoundTripper, e.g. for &http.Client{Transport: spectest.NewTransport(t, nil)}.
//
// # What is checked
//
// Check (and therefore the transport) ignores requests whose path does not
// start with /v1/. Floe serves the spec's prefixed routes
// (/v1/{prefix}/namespaces/...) and also plain routes without a prefix
// (/v1/namespaces/..., /v1/tables/rename, /v1/transactions/commit,
// /v1/views/...); the spec only defines the prefixed forms, so plain paths are
// routed as if a placeholder prefix segment had been inserted. /v1/config and
// /v1/oauth/tokens are routed as they are.
//
// A request whose method and path the spec does not define is an
// "undocumented route" error. The response status must be listed by the
// operation, either exactly, through a range such as 5XX, or through a
// "default" response; anything else is an error. The body is then validated
// against the schema of that response. HEAD responses are only checked for
// their status, and responses that the spec defines without content (204,
// 304, ...) must have an empty body.
//
// # Relaxations of the spec
//
// The spec file is used as is, except for these quirks (see LoadFile):
//
//   - Response headers of CreateTableResponse, LoadTableResponse and
//     CommitTableResponse $ref the Parameter object #/components/parameters/etag.
//     A Header Object may only reference #/components/headers, and kin-openapi
//     refuses to load the document ("expecting ref to header object"). Such
//     references are rewritten to a synthesised #/components/headers/<name>
//     built from the parameter without its name and in fields.
//   - The spec declares OpenAPI 3.1 but still marks schemas with the 3.0
//     keyword "nullable: true", which JSON Schema 2020-12 (used for 3.1
//     documents) ignores. The spec text explicitly allows null there
//     (next-page-token on the last page, metadata-location of a staged
//     table, namespace properties, ...), so "null" is added to the type of
//     each such schema.
//   - The server URL templates give the basePath variable the default "",
//     which kin-openapi treats as a missing (required) default. The servers
//     are dropped: they only describe hosts, and the validator routes on the
//     path alone so that any test server address matches.
//   - Many schema examples do not match their own schemas (e.g. the example
//     of the string schema Transform is an array of strings, and several
//     oneOf examples match more than one branch). The document is first
//     validated strictly; if that fails, it is validated again with example
//     validation disabled. Validator.Relaxations lists what was relaxed.
//     Response bodies are still validated against the full schemas.
package spectest
