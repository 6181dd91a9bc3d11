"""Views: text, HTML, module trees, statistics, pictures, comparisons. They read models and
values; nothing below imports them (values reach them through :mod:`remotetensors.hooks`)."""
