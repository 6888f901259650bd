/* backend_ais.c — ais:// sources. Stub until issue 3 lands. */
#include <errno.h>

#include "backend_i.h"

int backend__ais_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	(void)be;
	(void)source;
	(void)cfg;
	return -EPROTONOSUPPORT;
}
