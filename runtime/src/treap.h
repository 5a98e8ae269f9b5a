/* treap.h - an intrusive treap (randomised balanced search tree), used for
 * the allocator's address index and its best-fit free index. */
#ifndef NKRT_TREAP_H
#define NKRT_TREAP_H

#include <stdint.h>

typedef struct nkrt_treap_node {
  struct nkrt_treap_node *left, *right;
  uint32_t priority;
} nkrt_treap_node_t;

/* <0, 0, >0 like strcmp. */
typedef int (*nkrt_treap_cmp_fn)(const nkrt_treap_node_t *a, const nkrt_treap_node_t *b);

typedef struct nkrt_treap {
  nkrt_treap_node_t *root;
  nkrt_treap_cmp_fn cmp;
  uint32_t seed;
} nkrt_treap_t;

void nkrt_treap_init(nkrt_treap_t *treap, nkrt_treap_cmp_fn cmp);
/* Keys must be unique. */
void nkrt_treap_insert(nkrt_treap_t *treap, nkrt_treap_node_t *node);
void nkrt_treap_remove(nkrt_treap_t *treap, nkrt_treap_node_t *node);
/* Smallest node >= key, or NULL. */
nkrt_treap_node_t *nkrt_treap_lower_bound(const nkrt_treap_t *treap, const nkrt_treap_node_t *key);
/* Largest node <= key, or NULL. */
nkrt_treap_node_t *nkrt_treap_floor(const nkrt_treap_t *treap, const nkrt_treap_node_t *key);
nkrt_treap_node_t *nkrt_treap_max(const nkrt_treap_t *treap);

#endif
