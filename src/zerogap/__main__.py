from zerogap.cli import main

raise SystemExit(main())
