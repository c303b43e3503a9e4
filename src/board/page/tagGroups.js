// Scalar tags in groups, as TensorBoard groups its cards: by the part of the tag before its first
// "/" (layer1/weights and layer1/bias in group layer1). Unlike TensorBoard, where a tag without a
// "/" is a group of its own, those tags share one group (named ""), so a logdir of flat tags stays
// one grid of charts. A group shows its charts a page at a time; only the charts of an open
// group's current page exist in the page at all.

/** Charts in a page of a group. */
export const PAGE_SIZE = 50;
/** Up to this many tags (after the filter), every group starts open; beyond, only the first. */
export const OPEN_ALL_MAX_TAGS = 100;

/** The group of `tag`: the part before its first "/", or "" for a tag without one. */
export const groupOf = (tag) => {
  const slash = tag.indexOf("/");
  return slash < 0 ? "" : tag.slice(0, slash);
};

/** `tags` (sorted) in groups, `[{name, tags}]`, in the order of their first tag ("" first). */
export const groupTags = (tags) => {
  const groups = new Map();
  for (const tag of tags) {
    const name = groupOf(tag);
    const group = groups.get(name);
    if (group === undefined) groups.set(name, { name, tags: [tag] });
    else group.tags.push(tag);
  }
  return [...groups.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
};

/**
 * What each group shows: `[{name, tags, open, page, pages, shown}]`. `choices` holds the user's
 * (`open`: Map name → boolean, `page`: Map name → page index); without one, a group is open when
 * the tags number at most OPEN_ALL_MAX_TAGS, or when it is the first. `shown`: the tags of the
 * page shown (none when closed); a page past the end is the last.
 */
export const layoutGroups = (tags, choices) => {
  const groups = groupTags(tags);
  const openAll = tags.length <= OPEN_ALL_MAX_TAGS;
  return groups.map((g, i) => {
    const open = choices.open.get(g.name) ?? (openAll || i === 0);
    const pages = Math.max(1, Math.ceil(g.tags.length / PAGE_SIZE));
    const page = Math.min(Math.max(0, choices.page.get(g.name) ?? 0), pages - 1);
    return { ...g, open, page, pages, shown: open ? g.tags.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE) : [] };
  });
};
