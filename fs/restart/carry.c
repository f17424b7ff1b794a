// SPDX-License-Identifier: Apache-2.0
/* carry — see carry.h. */
#include "carry.h"
#include "keeper.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the saved text starts in the state memfd: past the state page. */
#define CARRY_OFFSET 4096
#define CARRY_MAX    (64u << 20)

struct carried {
	char *series; /* "name{labels}" as rendered */
	double value;
};

struct sfs_carry {
	struct carried *v; /* sorted by series */
	size_t n;
	char *text; /* what the series point into */
};

int sfs_carry_save(const char *text, size_t len, int state_fd, struct sfs_keeper_state *k)
{
	if (len > CARRY_MAX || pwrite(state_fd, text, len, CARRY_OFFSET) != (ssize_t)len)
		return -EIO;
	__atomic_store_n(&k->carry_len, (uint64_t)len, __ATOMIC_RELEASE);
	return 0;
}

static int by_series(const void *a, const void *b)
{
	return strcmp(((const struct carried *)a)->series, ((const struct carried *)b)->series);
}

/* Whether the sample's metric (series up to '{' or its end) was declared
 * a counter or a histogram in text so far: its "# TYPE" line names it (a
 * histogram's samples add _bucket, _sum or _count to the name). */
static bool carried_type(const char *types, const char *series)
{
	size_t len = strcspn(series, "{");
	char name[256];

	if (len >= sizeof(name))
		return false;
	memcpy(name, series, len);
	name[len] = '\0';
	for (const char *p = types; p && *p;) {
		const char *e = strchr(p, '\n');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		size_t nl = strcspn(p, " ");
		if (nl < l) {
			bool hist = strncmp(p + nl + 1, "histogram", 9) == 0;
			if (nl == len && !strncmp(p, name, nl))
				return true;
			if (hist && len > nl && !strncmp(p, name, nl) &&
			    (!strcmp(name + nl, "_bucket") || !strcmp(name + nl, "_sum") ||
			     !strcmp(name + nl, "_count")))
				return true;
		}
		p = e ? e + 1 : NULL;
	}
	return false;
}

struct sfs_carry *sfs_carry_load(int state_fd, struct sfs_keeper_state *k)
{
	uint64_t len = __atomic_load_n(&k->carry_len, __ATOMIC_ACQUIRE);

	if (!len || len > CARRY_MAX)
		return NULL;
	__atomic_store_n(&k->carry_len, 0, __ATOMIC_RELEASE); /* once: not after a crash */
	struct sfs_carry *c = calloc(1, sizeof(*c));
	char *text = malloc(len + 1);
	/* "name type\n" per counter or histogram declared */
	char *types = calloc(1, len + 1);
	if (!c || !text || !types || pread(state_fd, text, len, CARRY_OFFSET) != (ssize_t)len)
		goto fail;
	text[len] = '\0';
	c->text = text;
	size_t cap = 0, tl = 0;
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char name[256], type[32];
		if (sscanf(line, "# TYPE %255s %31s", name, type) == 2 &&
		    (!strcmp(type, "counter") || !strcmp(type, "histogram")))
			tl += (size_t)sprintf(types + tl, "%s %s\n", name, type);
		if (line[0] == '#' || !line[0])
			continue;
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		*sp = '\0';
		/* The keeper keeps the restarts itself: carried, they would count twice. */
		if (!carried_type(types, line) ||
		    !strncmp(line, "shardfs_daemon_restarts_total", 29))
			continue;
		if (c->n == cap) {
			cap = cap ? cap * 2 : 256;
			struct carried *v = realloc(c->v, cap * sizeof(*v));
			if (!v)
				goto fail;
			c->v = v;
		}
		c->v[c->n++] = (struct carried){line, strtod(sp + 1, NULL)};
	}
	free(types);
	qsort(c->v, c->n, sizeof(*c->v), by_series);
	return c;
fail:
	free(types);
	free(text);
	if (c)
		free(c->v);
	free(c);
	return NULL;
}

int sfs_carry_apply(const struct sfs_carry *c, char **text, size_t *len)
{
	char *out = NULL;
	size_t out_len = 0;
	FILE *f = open_memstream(&out, &out_len);

	if (!*text || !f) {
		if (f)
			fclose(f);
		free(out);
		return *text ? -ENOMEM : 0;
	}
	for (const char *line = *text, *end = *text + *len; line < end;) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		size_t l = nl ? (size_t)(nl - line) : (size_t)(end - line);
		const char *sp = NULL; /* the last space: before the value */
		for (size_t i = l; i-- > 0;)
			if (line[i] == ' ') {
				sp = line + i;
				break;
			}
		struct carried key = {0}, *hit = NULL;
		char series[512];
		if (line[0] != '#' && sp && (size_t)(sp - line) < sizeof(series)) {
			memcpy(series, line, (size_t)(sp - line));
			series[sp - line] = '\0';
			key.series = series;
			hit = bsearch(&key, c->v, c->n, sizeof(*c->v), by_series);
		}
		if (hit) {
			double v = strtod(sp + 1, NULL) + hit->value;
			if (memchr(sp + 1, '.', l - (size_t)(sp + 1 - line)))
				fprintf(f, "%s %.6f\n", series, v);
			else
				fprintf(f, "%s %.0f\n", series, v);
		} else {
			fwrite(line, 1, l, f);
			fputc('\n', f);
		}
		line += l + 1;
	}
	if (fclose(f) != 0) {
		free(out);
		return -ENOMEM;
	}
	free(*text);
	*text = out;
	*len = out_len;
	return 0;
}

void sfs_carry_free(struct sfs_carry *c)
{
	if (!c)
		return;
	free(c->v);
	free(c->text);
	free(c);
}
