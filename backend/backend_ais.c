/*
 * backend_ais.c — ais://BUCKET/PREFIX/ sources: AIStore, at AIS_ENDPOINT
 * (or --endpoint; default http://localhost:8080, a proxy a.k.a. gateway).
 *
 * Which AIStore API, and why:
 * - Objects are read with the native API, GET /v1/objects/BUCKET/KEY
 *   ?provider=ais with a Range header: the proxy answers 307 with the
 *   target that holds the object, and the I/O engine follows it, so bytes
 *   come straight from the target (docs/design.md: AIStore "follows its HTTP redirects
 *   from proxy to the target").
 * - Listing and HEAD use AIStore's S3-compatible API under ENDPOINT/s3
 *   (GET /s3/BUCKET?list-type=2&prefix=...&continuation-token=...,
 *   HEAD /s3/BUCKET/KEY), path style, unsigned. AIStore's native
 *   list-objects is "GET /v1/buckets/BUCKET" with a JSON request body
 *   ({"action": "list", "value": {"prefix", "continuation_token",
 *   "pagesize", "props"}}) answered in JSON (docs/http_api.md, "Listing
 *   objects"); the I/O engine's one request body is GetBatch's (below), and
 *   the S3 form returns the same names, sizes and continuation tokens in
 *   the ListObjectsV2 XML that backend_xml.c already parses safely — one
 *   hostile-input-safe parser instead of two. The native HEAD reports sizes
 *   in AIS-specific headers; the S3 HEAD gives Content-Length, ETag and
 *   Last-Modified, which the engine already reads.
 * - Batch reads (backend_batch_read) use GetBatch, GET /v1/ml/moss/BUCKET
 *   with a JSON body: backend_ais_batch.c.
 * Non-goals for now: AIStore AuthN tokens, non-ais providers behind AIS
 * (ais://@remais/..., provider=s3 etc.).
 *
 * All the logic is the object-store core of backend_s3.c (kind OS_AIS).
 */
#include "backend_i.h"

int backend__ais_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	return backend__os_open(be, OS_AIS, source, cfg);
}
