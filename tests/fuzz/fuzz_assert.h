/*
 * fuzz_assert.h — the harnesses' contract check: a broken contract aborts,
 * which libFuzzer reports as a crash with the input that broke it.
 */
#ifndef FUZZ_ASSERT_H
#define FUZZ_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#define FZ_ASSERT(cond)                                                                            \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz: contract broken %s:%d: %s\n", __FILE__, __LINE__,   \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
