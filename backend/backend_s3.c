/* backend_s3.c — s3:// and gs:// sources. Stub until issue 3 lands. */
#include <errno.h>

#include "backend_i.h"

int backend__s3_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	(void)be;
	(void)source;
	(void)cfg;
	return -EPROTONOSUPPORT;
}

int backend__gs_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	(void)be;
	(void)source;
	(void)cfg;
	return -EPROTONOSUPPORT;
}
