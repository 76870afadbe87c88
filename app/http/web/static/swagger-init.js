// /docs: Swagger UI (vendored) on this service's OpenAPI description. A file of
// its own, not an inline script, so that the page's CSP needs no 'unsafe-inline'.

window.ui = window.SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  layout: 'BaseLayout',
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  // The default asks a public validator about the description: nothing leaves.
  validatorUrl: null,
  presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
});
