// Spectral's resolver for `npm run lint:openapi`: local references only. The document has no remote
// references, but example data may hold a "$ref" member (SCIM resources do), which Spectral's default
// resolver would fetch over the network and report as an invalid reference.
const { Resolver } = require('@stoplight/spectral-ref-resolver');

module.exports = new Resolver({ dereferenceRemote: false });
