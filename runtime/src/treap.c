/* treap.c - intrusive treap: a binary search tree ordered by key and a heap
 * ordered by random priority, giving O(log n) expected operations. */
#include "treap.h"

#include <stddef.h>

void nkrt_treap_init(nkrt_treap_t *treap, nkrt_treap_cmp_fn cmp) {
  treap->root = NULL;
  treap->cmp = cmp;
  treap->seed = 0x9e3779b9u;
}

static uint32_t next_priority(nkrt_treap_t *treap) {
  /* xorshift32: deterministic, good enough for balancing */
  uint32_t x = treap->seed;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  treap->seed = x;
  return x;
}

/* Splits `t` into nodes < key (left) and nodes >= key (right). */
static void split(nkrt_treap_cmp_fn cmp, nkrt_treap_node_t *t, const nkrt_treap_node_t *key,
                  nkrt_treap_node_t **left, nkrt_treap_node_t **right) {
  if (!t) {
    *left = *right = NULL;
    return;
  }
  if (cmp(t, key) < 0) {
    split(cmp, t->right, key, &t->right, right);
    *left = t;
  } else {
    split(cmp, t->left, key, left, &t->left);
    *right = t;
  }
}

/* Joins two treaps where every key of a is below every key of b. */
static nkrt_treap_node_t *merge(nkrt_treap_node_t *a, nkrt_treap_node_t *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->priority > b->priority) {
    a->right = merge(a->right, b);
    return a;
  }
  b->left = merge(a, b->left);
  return b;
}

static nkrt_treap_node_t *insert(nkrt_treap_cmp_fn cmp, nkrt_treap_node_t *t,
                                 nkrt_treap_node_t *node) {
  if (!t) return node;
  if (node->priority > t->priority) {
    split(cmp, t, node, &node->left, &node->right);
    return node;
  }
  if (cmp(node, t) < 0)
    t->left = insert(cmp, t->left, node);
  else
    t->right = insert(cmp, t->right, node);
  return t;
}

void nkrt_treap_insert(nkrt_treap_t *treap, nkrt_treap_node_t *node) {
  node->left = node->right = NULL;
  node->priority = next_priority(treap);
  treap->root = insert(treap->cmp, treap->root, node);
}

void nkrt_treap_remove(nkrt_treap_t *treap, nkrt_treap_node_t *node) {
  nkrt_treap_node_t **link = &treap->root;
  while (*link && *link != node) {
    link = treap->cmp(node, *link) < 0 ? &(*link)->left : &(*link)->right;
  }
  if (*link) *link = merge(node->left, node->right);
  node->left = node->right = NULL;
}

nkrt_treap_node_t *nkrt_treap_lower_bound(const nkrt_treap_t *treap, const nkrt_treap_node_t *key) {
  nkrt_treap_node_t *t = treap->root, *best = NULL;
  while (t) {
    if (treap->cmp(t, key) >= 0) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

nkrt_treap_node_t *nkrt_treap_floor(const nkrt_treap_t *treap, const nkrt_treap_node_t *key) {
  nkrt_treap_node_t *t = treap->root, *best = NULL;
  while (t) {
    if (treap->cmp(t, key) <= 0) {
      best = t;
      t = t->right;
    } else {
      t = t->left;
    }
  }
  return best;
}

nkrt_treap_node_t *nkrt_treap_max(const nkrt_treap_t *treap) {
  nkrt_treap_node_t *t = treap->root;
  while (t && t->right) t = t->right;
  return t;
}
