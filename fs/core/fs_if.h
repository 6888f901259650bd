/*
 * fs_if.h — the --layout imagefolder view (fs_if_*.c; its layout is
 * fs_layout_imagefolder, fs_view.h). Its state (the published view, the
 * views a refresh replaced, and the lock that serialises building) lives
 * behind an opaque struct fs_imagefolder that fs->imagefolder points to,
 * made by fs_open (fs_if_new) and freed by fs_close (after the layout's
 * free hook, fs_if_clear); it owns its lock, and nothing outside
 * fs_if_view.c touches its fields. What the fs_if_*.c share, the view
 * (struct fs_ifview) included: fs_if_i.h.
 */
#ifndef FS_IF_H
#define FS_IF_H

struct fs;
struct fs_imagefolder;

/* The state of a view not built yet: 0, or -ENOMEM. */
int fs_if_new(struct fs_imagefolder **f);
/* Free it (after fs_if_clear freed the views; NULL: nothing). */
void fs_if_free(struct fs_imagefolder *f);
/* 1 once the view is built and published (for tests). */
int fs_if_ready(const struct fs *fs);

#endif
