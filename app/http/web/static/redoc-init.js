// /redoc: ReDoc (vendored) on this service's OpenAPI description; see swagger-init.js.

window.Redoc.init('/openapi.json', {}, document.getElementById('redoc'));
